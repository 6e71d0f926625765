#!/usr/bin/env python3
"""A grpc.health.v1.Health/Check call: exit 0 when the server answers SERVING.

    health_check.py [HOST:PORT] [SERVICE]      # default 127.0.0.1:50051, overall health ("")

grpc_health_probe is not packaged in Debian; this uses python3-grpcio (Debian) with a generic
unary call, so no generated stubs are needed: HealthCheckRequest{service} is field 1 (string)
and HealthCheckResponse{status} is field 1 (enum, SERVING = 1).
"""
import sys

import grpc


def main() -> int:
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    service = sys.argv[2].encode() if len(sys.argv) > 2 else b""
    request = (b"\x0a" + bytes([len(service)]) + service) if service else b""
    try:
        with grpc.insecure_channel(target) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            reply = check(request, timeout=3)
    except grpc.RpcError as e:
        print(f"health_check: {target}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    status = 0
    if len(reply) >= 2 and reply[0] == 0x08:
        status = reply[1]
    names = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
    print(f"health_check: {target}: {names.get(status, status)}")
    return 0 if status == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
