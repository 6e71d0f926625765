"""The job config's overrides from gradpress.torch's arguments (docs/python.md)."""
import json
import os


def codec_override(block, spec):
    """``["push=<YAML>"]`` for a codec given as a dict (the YAML block's keys), a shorthand
    string (``"topk ratio=0.01 then=qsgd levels=16 error_feedback=true"``) or a YAML flow
    mapping string; ``[]`` for None."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        return [f"{block}={json.dumps(spec)}"]  # JSON is a YAML flow mapping
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            return [f"{block}={text}"]
        from gradpress import _C  # after torch (gradpress.torch imports it first)

        return [_C.codec_override(block, text)]
    raise TypeError(f"{block}= takes a dict or a codec string, not {type(spec).__name__}")


def job_overrides(push=None, pull=None, bucket_mb=None, overrides=None):
    """The ``--set`` overrides of a job config, in the order they apply."""
    out = []
    for item in overrides or []:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"an override is 'key=value' (like --set), got {item!r}")
        out.append(item)
    out += codec_override("push", push)
    out += codec_override("pull", pull)
    if bucket_mb is not None:
        out.append(f"sync.bucket_mb={float(bucket_mb)!r}")
    return out


def from_launch(config, overrides):
    """The job ``gradpress.launch`` started the servers with: ``config`` None becomes
    ``$GRADPRESS_CONFIG``, and ``$GRADPRESS_SET`` (the launch's overrides, one a line) goes
    before ``overrides``, so a script given no config runs the servers' job."""
    if config is None:
        config = os.environ.get("GRADPRESS_CONFIG") or None
    launched = [line for line in os.environ.get("GRADPRESS_SET", "").splitlines() if line.strip()]
    if launched:
        overrides = launched + list(overrides or [])
    return config, overrides


def config_path(config):
    """A job YAML's path as a string, or None for the defaults."""
    if config is None:
        return None
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if not os.path.isfile(path):
            raise ValueError(f"config: no such file '{path}'")
        return path
    raise TypeError(f"config= takes a YAML file's path, not {type(config).__name__}")
