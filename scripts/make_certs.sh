#!/usr/bin/env bash
# Test certificates for gradpress's TLS (security: block, transport/security.h), made with
# openssl: a CA, a server certificate for the given names, a client certificate (mutual TLS)
# and a random bearer token. For experiments on a closed cluster; use your own PKI otherwise.
#
#   scripts/make_certs.sh DIR [NAME...]   # NAMEs: DNS names or IPs of the server
#                                         # (default: localhost 127.0.0.1)
#
# Writes DIR/ca.pem, ca.key, server.pem, server.key, client.pem, client.key, token (mode 600
# for keys and token) and prints the config block that uses them.
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR [NAME...]}
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(localhost 127.0.0.1)
command -v openssl >/dev/null || { echo "make_certs: openssl not found (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
umask 077

san=""
for n in "${names[@]}"; do
  if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+="IP:$n,"; else san+="DNS:$n,"; fi
done
san=${san%,}

openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=gradpress test CA" \
  -keyout ca.key -out ca.pem 2>/dev/null
sign() {  # NAME SUBJECT EXTENSIONS
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
sign server "/CN=${names[0]}" "subjectAltName=$san
extendedKeyUsage=serverAuth"
sign client "/CN=gradpress worker" "extendedKeyUsage=clientAuth"
rm -f ca.srl
openssl rand -hex 32 >token
chmod 644 ca.pem server.pem client.pem

abs=$(pwd)
cat <<EOF
make_certs: wrote $abs/{ca,server,client}.{pem,key} and $abs/token (server names: ${names[*]})
security:            # the server reads cert/key/client_ca, the workers ca/client_cert/client_key
  tls: true
  cert: $abs/server.pem
  key: $abs/server.key
  client_ca: $abs/ca.pem        # mutual TLS: workers must present a certificate from this CA
  ca: $abs/ca.pem
  client_cert: $abs/client.pem
  client_key: $abs/client.key
  token_file: $abs/token        # or GRADPRESS_TOKEN in the environment
EOF
