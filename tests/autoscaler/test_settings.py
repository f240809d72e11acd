import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from adapters.gpu_units import GpuUnits
from autoscaler.commands.cli import main
from autoscaler.config.gpu_unit_settings import pod_gpu_units, pod_pool_label
from autoscaler.config.settings import Settings
from autoscaler.config.settings_loader import SettingsError, load_settings
from tests.cli_helpers import assert_usage_error


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def test_defaults_are_valid():
    settings = load_settings(None, environ={})
    assert settings.server.secure_port == 6443
    assert settings.server.http_port == 8080
    assert settings.auth.mode == "kubernetes"


def test_file_values_and_durations(tmp_path):
    path = write(
        tmp_path, "server:\n  secure_port: 7443\n  shutdown_grace: 1m30s\nauth:\n  authorization_cache_ttl: 5s\n"
    )
    settings = load_settings(path, environ={})
    assert settings.server.secure_port == 7443
    assert settings.server.shutdown_grace == timedelta(seconds=90)
    assert settings.auth.authorization_cache_ttl == timedelta(seconds=5)


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, "server:\n  secure_port: 7443\n")
    environ = {
        "GPU_AUTOSCALER_SERVER__SECURE_PORT": "9443",
        "GPU_AUTOSCALER_AUTH__ALLOWED_NAMES": "[front-proxy-client, aggregator]",
        "UNRELATED": "x",
    }
    settings = load_settings(path, environ=environ)
    assert settings.server.secure_port == 9443
    assert settings.auth.allowed_names == ("front-proxy-client", "aggregator")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "server:\n  secure_port: abc\n",
            "server.secure_port: Value error, expected a whole number, not text, a boolean or a float (write 300, "
            "not '300', 300.0 or 1e3) (got 'abc')",
        ),
        (
            "server:\n  secure_port: 70000\n",
            "server.secure_port: Input should be less than or equal to 65535 (got 70000)",
        ),
        ("server:\n  scure_port: 1\n", "server.scure_port: unknown field (got 1)"),
        ("auth:\n  mode: ldap\n", "auth.mode: Input should be 'kubernetes', 'files' or 'none' (got 'ldap')"),
        ("auth:\n  token_cache_ttl: soon\n", "auth.token_cache_ttl: Value error, invalid duration 'soon'"),
        (
            "server:\n  tls:\n    cert_file: a.crt\n",
            "server.tls: Value error, cert_file and key_file must be given together",
        ),
        ("auth:\n  mode: none\n", "auth.mode 'none' is only allowed when server.bind_address is a loopback address"),
        ("server:\n  secure_port: 8080\n", "secure_port and http_port must differ"),
        ("auth:\n  mode: files\n", "mode 'files' needs requestheader_client_ca_file or client_ca_file"),
        ("windows:\n  - {name: w, cron: '0 2 * *', gpus: 1, duration: 1h}\n", "windows.0: Value error"),
        ("windows:\n  - {name: w, cron: '0 2 * * *', timezone: Mars/Base, gpus: 1, duration: 1h}\n", "Mars/Base"),
        (
            "windows:\n  - {name: w, cron: '0 2 * * *', gpus: 0, duration: 1h}\n",
            "windows.0.gpus: Input should be greater than 0",
        ),
        ("signals:\n  - {name: s, preset: gpus_requested}\n", "signals need a prometheus section"),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested, query: up}\n",
            "signals.0: Value error, give exactly one of preset and query",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: request_rate}\n",
            "preset request_rate needs metric",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested}\n"
            "metrics:\n  m: {signal: t, kind: demand}\n",
            "metrics.m.signal 't' is not one of the signals (s)",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested}\n"
            "metrics:\n  m: {signal: s, kind: demand, fallback: static}\n",
            "fallback 'static' needs fallback_value",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested}\n"
            "metrics:\n  m: {signal: s, kind: demand, quantile: 1.5}\n",
            "metrics.m.quantile: Input should be less than 1 (got 1.5)",
        ),
        ("prometheus: {url: 'prometheus:9090'}\n", "url must start with http:// or https://"),
        (
            "inputs:\n  resource_claims: {device_classes: {gpu.amd.com: 0}}\n",
            "inputs.resource_claims.device_classes.gpu.amd.com.literal['mig-profile']: Input should be "
            "'mig-profile' (got 0)",
        ),
        (
            "inputs:\n  placeholder_selector: 'app in (a'\n",
            "inputs: Value error, placeholder_selector: ",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested, per_step: max}\n",
            "signals.0.per_step: Input should be 'last' or 'peak' (got 'max')",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n"
            "  - {name: s, preset: gpu_utilization, exclude_namespaces: [a]}\n",
            "signals.0: Value error, preset gpu_utilization does not take exclude_namespaces",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, query: up, aggregation: max}\n",
            "signals.0: Value error, a custom query takes no preset options (aggregation",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n"
            "  - {name: s, preset: gpus_requested, exclude_namespaces: [A_B]}\n",
            "exclude_namespaces: 'A_B' is not a namespace name",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n"
            "  - {name: s, preset: gpus_requested, time_slicing: {nvidia.com/gpu.shared: 0}}\n",
            "signals.0.time_slicing.nvidia.com/gpu.shared: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n"
            "  - {name: a, preset: gpus_requested, time_slicing: {nvidia.com/gpu.shared: 4}}\n"
            "  - {name: b, preset: gpus_requested, by: [namespace], time_slicing: {nvidia.com/gpu.shared: 2}}\n",
            "nvidia.com/gpu.shared counts 1/4 GPU in one signal, 1/2 in another",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested, resource: gpu}\n",
            "'gpu' is not an extended resource name (<domain>/<name>)",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested, liveness: ''}\n",
            "liveness must be PromQL, true (the preset's own) or false (none)",
        ),
        (
            "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested, step: 15m}\n"
            "metrics:\n  m: {signal: s, kind: demand, staleness_ttl: 15m}\n",
            "metrics.m.staleness_ttl must be longer than the step of signal 's' (0:15:00)",
        ),
    ],
)
def test_bad_config_names_the_field_value_and_expectation(tmp_path, text, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert expected in str(caught.value)
    assert str(tmp_path / "settings.yaml") in str(caught.value)


def test_auth_none_is_allowed_on_loopback(tmp_path):
    settings = load_settings(write(tmp_path, "server:\n  bind_address: 127.0.0.1\nauth:\n  mode: none\n"), environ={})
    assert settings.auth.mode == "none"


def test_bad_yaml_names_line_and_column(tmp_path):
    with pytest.raises(SettingsError, match=r"not valid YAML at line 3, column 1: expected ',' or ']'"):
        load_settings(write(tmp_path, "server:\n  secure_port: [1\n"), environ={})


def test_non_mapping_top_level(tmp_path):
    with pytest.raises(SettingsError, match="must hold a mapping at the top, got list"):
        load_settings(write(tmp_path, "- a\n"), environ={})


def test_missing_file(tmp_path):
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(tmp_path / "nope.yaml", environ={})


def test_check_config_exit_codes(tmp_path):
    runner = CliRunner()
    good = write(tmp_path, "server:\n  secure_port: 7443\n")
    result = runner.invoke(main, ["check-config", str(good)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("server:\n  secure_port: abc\n")
    result = runner.invoke(main, ["check-config", str(bad)])
    assert_usage_error(result, "server.secure_port")


def test_console_script_help_and_version():
    for args in (["--help"], ["serve", "--help"], ["check-config", "--help"], ["--version"]):
        completed = subprocess.run(
            [sys.executable, "-m", "autoscaler", *args], capture_output=True, text=True, timeout=60
        )
        assert completed.returncode == 0, completed.stderr
    assert "0.1.0" in completed.stdout


@given(
    st.dictionaries(
        st.sampled_from(["server", "auth", "demo", "state_dir", "bogus"]),
        st.one_of(st.integers(), st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2)),
    )
)
def test_loader_never_crashes_on_random_documents(document):
    try:
        Settings.model_validate(document)
    except Exception as error:  # only pydantic's ValidationError is acceptable
        assert type(error).__name__ == "ValidationError"


def test_serve_refuses_a_bad_config_naming_the_field(tmp_path):
    bad = write(tmp_path, "server:\n  http_port: -1\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(bad)])
    assert_usage_error(result, "server.http_port: Input should be greater than or equal to 0 (got -1)")


def test_shipped_example_is_valid():
    example = Path(__file__).resolve().parents[2] / "examples" / "gpu-autoscaler.yaml"
    settings = load_settings(example, environ={})
    assert set(settings.metrics) == {"gpu_demand_forecast", "gpu_headroom", "request_rate_forecast"}
    assert settings.windows[0].timezone == "Europe/Berlin"


def configured_queries(tmp_path, signals: str) -> dict:
    """The query of each signal in ``signals`` (YAML list items), as the service builds them."""
    from autoscaler.refresh.sources import signal_query

    text = "prometheus: {url: 'http://p:9090'}\nsignals:\n" + signals
    settings = load_settings(write(tmp_path, text), environ={})
    return {spec.name: signal_query(spec) for spec in settings.signals}


def test_pending_pods_and_windows_count_in_the_gpu_signals_units(tmp_path):
    text = (
        "prometheus: {url: 'http://p:9090'}\nsignals:\n"
        "  - {name: requested, preset: gpus_requested, resource: [nvidia.com/gpu, amd.com/gpu], mig: false,"
        " time_slicing: {nvidia.com/gpu.shared: 4}}\n"
        "  - {name: capacity, preset: gpus_allocatable, resource: nvidia.com/gpu}\n"
    )
    settings = load_settings(write(tmp_path, text), environ={})
    assert pod_gpu_units(settings.signals) == GpuUnits(
        ("nvidia.com/gpu", "amd.com/gpu"), False, {"nvidia.com/gpu.shared": 4}
    )
    from autoscaler.refresh.sources import signal_query

    requested = signal_query(settings.signals[0])
    assert 'resource=~"nvidia_com_gpu|amd_com_gpu|nvidia_com_gpu_shared"}' in requested.promql


def test_the_gpus_requested_signals_name_their_pools_by_one_label(tmp_path):
    signals = (
        "  - {name: requested, preset: gpus_requested, nodepool_label: label_example_com_gpu_pool}\n"
        "  - {name: capacity, preset: gpus_allocatable}\n"  # another preset may use its own
    )
    settings = load_settings(write(tmp_path, "prometheus: {url: 'http://p:9090'}\nsignals:\n" + signals), environ={})
    assert pod_pool_label(settings.signals) == "label_example_com_gpu_pool"
    second = "  - {name: training, preset: gpus_requested, exclude_namespaces: [gpu-placeholders]}\n"
    with pytest.raises(
        SettingsError, match=r"different labels: \['label_example_com_gpu_pool', 'label_karpenter_sh_nodepool'\]"
    ):
        load_settings(write(tmp_path, "prometheus: {url: 'http://p:9090'}\nsignals:\n" + signals + second), environ={})


def test_preset_options_come_from_the_config(tmp_path):
    queries = configured_queries(
        tmp_path,
        "  - name: requested\n    preset: gpus_requested\n    resource: nvidia.com/gpu\n    mig: false\n"
        "    time_slicing: {nvidia.com/gpu.shared: 4}\n    exclude_namespaces: [gpu-placeholders]\n"
        "    aggregation: max\n    nodepool_label: label_pool\n"
        "  - {name: utilization, preset: gpu_utilization, aggregation: min, liveness: false}\n"
        "  - {name: custom, query: 'sum(up)', liveness: 'up{job=\"x\"}'}\n",
    )
    requested = queries["requested"]
    assert requested.promql.startswith("max by (nodepool) (")
    assert 'resource=~"nvidia_com_gpu|nvidia_com_gpu_shared", namespace!~"gpu-placeholders"}' in requested.promql
    assert '"label_pool", "(.*)"' in requested.promql and requested.pools and "label_pool" in requested.pools
    assert queries["utilization"].promql.startswith("min by (node) (")
    assert queries["utilization"].liveness is None
    assert queries["custom"].liveness == 'up{job="x"}' and not queries["custom"].zero_when_absent


def test_each_point_is_the_steps_peak_for_gpus_requested_and_the_sample_otherwise(tmp_path):
    queries = configured_queries(
        tmp_path,
        "  - {name: requested, preset: gpus_requested}\n"
        "  - {name: requested_samples, preset: gpus_requested, per_step: last}\n"
        "  - {name: utilization, preset: gpu_utilization}\n"
        "  - {name: custom, query: 'sum(up)'}\n"
        "  - {name: custom_peak, query: 'sum(up)', per_step: peak, step: 1m}\n",
    )
    assert {name: query.per_step for name, query in queries.items()} == {
        "requested": "peak",
        "requested_samples": "last",
        "utilization": "last",
        "custom": "last",
        "custom_peak": "peak",
    }
    assert queries["custom_peak"].range_promql == "max_over_time((sum(up))[59999ms:30s] offset 30s)"
    assert queries["requested"].range_promql.startswith("max_over_time((sum by (nodepool) (")
