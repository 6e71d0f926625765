"""gradpress.torch with TLS and a bearer token, the keys the C++ worker takes (issue 31)."""
import subprocess

import pytest
import torch

import gp_testlib
import gradpress.torch as gp
from gp_testlib import Server, assert_weights_match, job_yaml, train_pair


def make_pki(d):
    """A CA and a server certificate for localhost / 127.0.0.1 (EC keys, valid a day)."""
    def ssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=gradpress-test-ca")
    ssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.ext")
    (d / "token").write_text("s3cret-token\n")
    (d / "wrong-token").write_text("not-the-token\n")


def secure_yaml(d, workers=2):
    return job_yaml(overlap=False, workers=workers) + (
        f"security: {{tls: true, cert: {d}/server.pem, key: {d}/server.key, ca: {d}/ca.pem, "
        f"server_name: localhost, token_file: {d}/token}}\n")


def test_two_workers_train_over_tls_with_a_token(tmp_path):
    make_pki(tmp_path)
    steps = 3
    w = train_pair(tmp_path, secure_yaml(tmp_path), steps)
    ref = gp_testlib.reference_weights(steps, workers=2, lr=0.1, momentum=0.9)
    assert_weights_match(w, ref)


def test_a_wrong_token_is_a_clear_error(tmp_path):
    make_pki(tmp_path)
    config = tmp_path / "job.yaml"
    config.write_text(secure_yaml(tmp_path, workers=1))
    server = Server(tmp_path, config, workers=1)
    try:
        model = gp_testlib.make_model()
        opt = gp.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
            config=str(config), rank=0, world_size=1, server=server.address,
            overrides=[f"security.token_file={tmp_path}/wrong-token", "server.deadline_s=10"])
        with pytest.raises(RuntimeError, match="(?i)token"):
            gp.broadcast_parameters(model, opt)
        opt.close(flush_rows=False)
        assert server.proc.poll() is None  # the server still serves
    finally:
        server.stop()
