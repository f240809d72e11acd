"""``server.grpc_port`` and ``--grpc-port``: off by default, on in the demo, validated with the field named."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import autoscaler.app.serving
from autoscaler.app.serving import prepare_demo
from autoscaler.commands.cli import main
from autoscaler.config.settings import Settings
from autoscaler.config.settings_loader import SettingsError, load_settings
from tests.cli_helpers import assert_usage_error


def test_the_grpc_port_is_off_unless_configured():
    settings = load_settings(None, environ={})
    assert (settings.server.grpc_port, settings.server.grpc_client_ca_file) == (None, None)


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("grpc_port: -1", "server.grpc_port: Input should be greater than or equal to 0 (got -1)"),
        ("grpc_port: 70000", "server.grpc_port: Input should be less than or equal to 65535 (got 70000)"),
        ("grpc_port: 6443", "server: Value error, secure_port and grpc_port must differ"),
        ("grpc_port: 8080", "server: Value error, http_port and grpc_port must differ"),
        ("grpc_client_ca_file: [a]", "server.grpc_client_ca_file: Input is not a valid path"),
    ],
)
def test_bad_grpc_settings_name_the_field(tmp_path, server, message):
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  {server}\n")
    with pytest.raises(SettingsError) as raised:
        load_settings(path, environ={})
    assert message in str(raised.value)


def test_port_zero_is_any_free_port_and_may_repeat():
    """0 is "any free port" for every port, so several zeros do not clash (the tests' settings)."""
    settings = Settings.model_validate({"server": {"secure_port": 0, "http_port": 0, "grpc_port": 0}})
    assert settings.server.grpc_port == 0


@pytest.fixture
def served(monkeypatch) -> list[Settings]:
    """What ``gpu-autoscaler serve`` would serve, after the demo's preparation, without serving it."""
    seen: list[Settings] = []

    async def capture(settings: Settings) -> None:
        seen.append(prepare_demo(settings) if settings.demo.enabled else settings)

    monkeypatch.setattr(autoscaler.app.serving, "serve", capture)
    return seen


@pytest.mark.parametrize(
    ("arguments", "environment", "port"),
    [
        ([], {}, 9443),  # the demo serves it, next to kubectl
        (["--grpc-port", "0"], {}, 0),
        (["--grpc-port", "7000"], {}, 7000),
        (["--grpc-port", "off"], {}, None),
        ([], {"GPU_AUTOSCALER_SERVER__GRPC_PORT": "null"}, None),
    ],
)
def test_the_demo_serves_grpc_with_its_ca_unless_switched_off(tmp_path, served, arguments, environment, port):
    result = CliRunner().invoke(main, ["serve", "--state-dir", str(tmp_path), *arguments], env=environment)
    assert result.exit_code == 0, result.output
    [settings] = served
    assert settings.server.grpc_port == port
    assert settings.server.grpc_client_ca_file == tmp_path / "ca.crt"  # the kubeconfig's client CA


def test_a_configured_service_has_no_grpc_port_unless_asked(tmp_path, served):
    config = tmp_path / "settings.yaml"
    config.write_text("auth:\n  mode: none\nserver:\n  bind_address: 127.0.0.1\n")
    assert CliRunner().invoke(main, ["serve", "--config", str(config)]).exit_code == 0
    assert CliRunner().invoke(main, ["serve", "--config", str(config), "--grpc-port", "7000"]).exit_code == 0
    assert [settings.server.grpc_port for settings in served] == [None, 7000]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "Invalid value for '--grpc-port': 'abc' is neither a port number nor 'off'"),
        ("70000", "server.grpc_port: Input should be less than or equal to 65535 (got 70000)"),
        ("6443", "secure_port and grpc_port must differ"),
    ],
)
def test_a_bad_grpc_port_option_is_a_usage_error(tmp_path, value, message):
    result = CliRunner().invoke(main, ["serve", "--state-dir", str(tmp_path), "--grpc-port", value])
    assert_usage_error(result, message)
