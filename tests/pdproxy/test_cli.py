"""CLI and config file parsing (no processes)."""

import pytest

from pdproxy.cli import config_from_args
from pdproxy.config import ConfigError


def test_example_proxy_flags_are_accepted():
    cfg = config_from_args(["--host", "127.0.0.1", "--port", "1999",
                            "--prefiller-hosts", "10.0.0.1", "10.0.0.2", "--prefiller-ports", "7100", "7101",
                            "--decoder-hosts", "10.0.0.3", "--decoder-ports", "7100", "7101",
                            "--max-retries", "2", "--retry-delay", "0.01", "--workers", "1"])
    assert cfg.prefill == ["10.0.0.1:7100", "10.0.0.2:7101"]
    assert cfg.decode == ["10.0.0.3:7100", "10.0.0.3:7101"]
    assert cfg.max_retries == 2 and cfg.port == 1999


def test_yaml_file_then_flags_win(tmp_path):
    f = tmp_path / "proxy.yaml"
    f.write_text("port: 9100\nprefill: [127.0.0.1:7001]\ndecode:\n  - 127.0.0.1:7002\npolicy: round_robin\n"
                 "rate-limit: 50\nadmin-token: abc\n")
    cfg = config_from_args(["--config", str(f), "--policy", "consistent_hash"])
    assert cfg.port == 9100 and cfg.prefill == ["127.0.0.1:7001"] and cfg.decode == ["127.0.0.1:7002"]
    assert cfg.policy == "consistent_hash" and cfg.rate_limit == 50 and cfg.admin_token == "abc"


def test_bad_settings_are_refused_with_their_name(tmp_path):
    with pytest.raises(ConfigError, match="HOST:PORT"):
        config_from_args(["--prefill", "nohost"])
    with pytest.raises(ConfigError, match="same length"):
        config_from_args(["--prefiller-hosts", "a", "b", "--prefiller-ports", "1", "2", "3"])
    with pytest.raises(ConfigError, match="wildcard"):
        config_from_args(["--host", "0.0.0.0"])
    f = tmp_path / "bad.yaml"
    f.write_text("prefil: [a:1]\n")
    with pytest.raises(ConfigError, match="prefil"):
        config_from_args(["--config", str(f)])


def test_admin_token_file(tmp_path):
    f = tmp_path / "tok"
    f.write_text("t0ken\n")
    assert config_from_args(["--admin-token-file", str(f)]).admin_token == "t0ken"


def test_admin_listener_flags_and_yaml(tmp_path):
    cfg = config_from_args(["--admin-host", "127.0.0.2", "--admin-port", "9901"])
    assert cfg.admin_listener == ("127.0.0.2", 9901)
    assert config_from_args(["--admin-port", "9901"]).admin_listener == ("127.0.0.1", 9901)
    assert config_from_args([]).admin_listener is None
    f = tmp_path / "proxy.yaml"
    f.write_text("admin_host: 127.0.0.3\nadmin-port: 9902\n")
    assert config_from_args(["--config", str(f)]).admin_listener == ("127.0.0.3", 9902)


def test_admin_listener_is_refused_when_it_is_wild_or_clashes(monkeypatch):
    monkeypatch.delenv("PDPROXY_ALLOW_WILDCARD", raising=False)
    for wild in ("0.0.0.0", "::", ""):
        with pytest.raises(ConfigError, match="admin_host.*wildcard"):
            config_from_args(["--admin-host", wild, "--admin-port", "9901"])
    with pytest.raises(ConfigError, match="admin_port"):
        config_from_args(["--admin-host", "127.0.0.2"])
    with pytest.raises(ConfigError, match="admin_port"):
        config_from_args(["--admin-port", "70000"])
    with pytest.raises(ConfigError, match="admin_port"):
        config_from_args(["--port", "9901", "--admin-port", "9901"])


def test_head_caps_are_validated():
    cfg = config_from_args([])
    assert (cfg.max_header_count, cfg.max_header_bytes, cfg.max_url_bytes) == (100, 64 * 1024, 8 * 1024)
    with pytest.raises(ConfigError, match="max_header_count"):
        config_from_args(["--max-header-count", "0"])
    with pytest.raises(ConfigError, match="max_header_line_bytes"):
        config_from_args(["--max-header-bytes", "1000", "--max-header-line-bytes", "2000"])
