"""ais_bench on the control plane sees none of the worker's own settings: mmengine expands {{$NAME}} in a config's
text and prints the value it used, so a secret in its environment is one config away from a run's log."""

from apps.evals.hosts import LocalHost, worker_env_for_ais_bench


def test_the_control_planes_secrets_and_urls_never_reach_ais_bench(monkeypatch, settings):
    for name, value in {"SECRET_KEY": "django-secret", "PDCP_SECRETS_KEY": "fernet-key",
                        "DATABASE_URL": "postgres://u:pw@db/x", "REDIS_URL": "redis://:pw@r/0",
                        "HF_HUB_OFFLINE": "1", "LC_ALL": "C.UTF-8", "HTTPS_PROXY": "http://proxy:3128"}.items():
        monkeypatch.setenv(name, value)
    env = LocalHost(1).base_env
    assert not {"SECRET_KEY", "PDCP_SECRETS_KEY", "DATABASE_URL", "REDIS_URL"} & set(env)
    assert "fernet-key" not in env.values() and "django-secret" not in env.values()
    assert (env["HF_HUB_OFFLINE"], env["LC_ALL"], env["HTTPS_PROXY"]) == ("1", "C.UTF-8", "http://proxy:3128")
    assert env["PATH"]


def test_only_listed_names_pass():
    assert worker_env_for_ais_bench({"PATH": "/bin", "PDCP_ADMIN_PASSWORD": "x", "LC_CTYPE": "C",
                                     "CELERY_BROKER_URL": "redis://", "TOKENIZERS_PARALLELISM": "false"}) == {
        "PATH": "/bin", "LC_CTYPE": "C", "TOKENIZERS_PARALLELISM": "false"}
