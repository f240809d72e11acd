"""The trace registry: pinned hashes, where the cache is, the one message for missing traces, slices."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

from autoscaler.config.settings_loader import ENV_PREFIX, load_settings
from tests import ci, trace_slices, traces

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.traces
def test_the_cached_traces_match_their_pinned_sha256():
    assert traces.verify() == []


@pytest.mark.traces
@pytest.mark.parametrize("name", sorted(trace_slices.SERIES))
def test_a_committed_series_slice_equals_its_derivation(name):
    derive, _ = trace_slices.SERIES[name]
    pd.testing.assert_series_equal(trace_slices.series(name), derive().rename_axis(None), check_freq=True)


@pytest.mark.traces
def test_the_committed_serving_slice_equals_its_derivation():
    name = "genai_serving_per_sample"
    pd.testing.assert_frame_equal(trace_slices.frame(name), trace_slices.FRAMES[name]())


def test_every_registry_entry_points_at_a_pinned_upstream_commit():
    for entry in traces.REGISTRY:
        assert entry.url.startswith("https://raw.githubusercontent.com/"), entry.url
        commit = entry.url.split("/")[5]
        assert len(commit) == 40 and int(commit, 16) >= 0, entry.url
        assert len(entry.sha256) == len(entry.csv_sha256) == 64
        assert entry.name.endswith(".csv.gz")
        assert (entry.sha256 == entry.csv_sha256) != entry.archived


def test_the_variable_does_not_collide_with_the_settings_prefix():
    assert not traces.VARIABLE.startswith(ENV_PREFIX)


def test_the_service_starts_with_the_variable_set(monkeypatch):
    """GPU_AUTOSCALER_DATA was read as a settings field ("data: unknown field"); this one is not."""
    monkeypatch.setenv(traces.VARIABLE, "/nowhere")
    assert load_settings(None, overrides={"demo.enabled": True}).demo.enabled


def test_fetch_downloads_only_what_is_missing_through_pooch_with_the_pinned_hash(monkeypatch, tmp_path):
    import pooch

    content = b"timestamp,value\n2020-05-01T00:00:00Z,3\n"
    entry, downloaded = _entry(content, archived=True)
    asked = []

    def retrieve(url, known_hash, path, progressbar):
        asked.append((url, known_hash))
        (Path(path) / "download").write_bytes(downloaded)
        return str(Path(path) / "download")

    monkeypatch.setattr(pooch, "retrieve", retrieve)
    monkeypatch.setenv(traces.VARIABLE, str(tmp_path / "cache"))
    assert traces.fetch([entry]) == [tmp_path / "cache" / entry.name]
    assert asked == [(entry.url, f"sha256:{entry.sha256}")]
    assert traces.fetch([entry]) == [] and len(asked) == 1  # present: not downloaded again
    assert traces.verify([entry]) == []


def test_the_variable_sets_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(traces.VARIABLE, str(tmp_path))
    assert traces.cache_dir() == tmp_path
    monkeypatch.delenv(traces.VARIABLE)
    expected = traces.SHARED if traces.SHARED.is_dir() else Path.home() / ".cache" / "gpu-autoscaler" / "traces"
    monkeypatch.setenv("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    assert traces.cache_dir() == expected


def test_a_missing_trace_is_the_one_message(monkeypatch, tmp_path):
    monkeypatch.setenv(traces.VARIABLE, str(tmp_path / "empty"))
    name = "alibaba_gpu_v2023/openb_pod_list_default.csv.gz"
    with pytest.raises(traces.TracesMissing) as raised:
        traces.path(name)
    assert str(raised.value) == (
        f"the public traces the tests read are missing: {name} not in {tmp_path / 'empty'} "
        "(set by GPU_TRACES_DIR). Run `make traces` to download them (about 58 MB from GitHub, "
        "each checked against its pinned sha256), or set GPU_TRACES_DIR to a directory that holds them "
        "(CI: ../shared/data)."
    )
    assert len(traces.missing()) == len(traces.REGISTRY)
    assert "and 18 more" in traces.missing_message(traces.missing())


def _entry(content: bytes, *, archived: bool) -> tuple[traces.TraceFile, bytes]:
    csv_sha256 = hashlib.sha256(content).hexdigest()
    if not archived:
        return traces.TraceFile("x/plain.csv.gz", "https://example.invalid/plain.csv", csv_sha256, csv_sha256), content
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("one.csv")
        info.size = len(content)
        archive.addfile(info, io.BytesIO(content))
    packed = buffer.getvalue()
    url = "https://example.invalid/one.tar.gz"
    return traces.TraceFile("x/one.csv.gz", url, hashlib.sha256(packed).hexdigest(), csv_sha256), packed


@pytest.mark.parametrize("archived", [False, True])
def test_a_download_is_stored_as_gzip_csv_and_verified(tmp_path, monkeypatch, archived):
    content = b"timestamp,value\r\n2020-05-01T00:00:00Z,3\r\n"
    entry, downloaded = _entry(content, archived=archived)
    (tmp_path / "download").write_bytes(downloaded)
    stored = traces.store(entry, tmp_path / "download", tmp_path / "cache")
    assert stored == tmp_path / "cache" / entry.name
    assert gzip.decompress(stored.read_bytes()) == content
    monkeypatch.setenv(traces.VARIABLE, str(tmp_path / "cache"))
    assert traces.verify([entry]) == []
    stored.write_bytes(gzip.compress(content + b"tampered\n"))
    assert traces.verify([entry])[0].startswith(f"{entry.name}: sha256 of the CSV is ")


def test_a_download_whose_csv_is_not_the_pinned_one_is_refused(tmp_path):
    entry, _ = _entry(b"a,b\n1,2\n", archived=False)
    (tmp_path / "download").write_bytes(b"a,b\n1,3\n")
    with pytest.raises(ValueError, match="the CSV's sha256 is"):
        traces.store(entry, tmp_path / "download", tmp_path / "cache")
    assert not (tmp_path / "cache" / entry.name).exists()


def test_without_the_traces_the_session_stops_at_once_with_the_message(tmp_path):
    """Under CI too: no test runs, none is skipped; the one message names the variable and the command."""
    environment = {**os.environ, traces.VARIABLE: str(tmp_path / "empty"), "CI": "true"}
    selected = "tests/test_trace_registry.py::test_the_cached_traces_match_their_pinned_sha256"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", selected],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert output.count("the public traces the tests read are missing") == 1, output
    assert "GPU_TRACES_DIR" in output and "make traces" in output
    assert "skipped" not in output and "passed" not in output and "FileNotFoundError" not in output


def _refused_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_fetch_without_network_ends_in_one_line_saying_what_to_do(tmp_path):
    """The download goes through a proxy that refuses the connection, as a machine without network."""
    proxy = f"http://127.0.0.1:{_refused_port()}"
    environment = {key: value for key, value in os.environ.items() if key.lower() != "no_proxy"}
    environment |= {traces.VARIABLE: str(tmp_path / "empty"), "HTTPS_PROXY": proxy, "https_proxy": proxy}
    result = subprocess.run(
        [sys.executable, "-m", "tests.traces", "fetch"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    first = traces.REGISTRY[0].name
    assert line.startswith(f"error: cannot download {first} from raw.githubusercontent.com (")
    assert "Connection refused" in line and "Traceback" not in line
    assert "set GPU_TRACES_DIR to a directory that holds the traces (../shared/data" in line


def _clone(tmp_path: Path) -> Path:
    if shutil.which("git") is None or shutil.which("make") is None:
        ci.missing_tool("git and make are needed to clone and run the Makefile (Debian: apt-get install git make)")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    for changed in ("Makefile", "tests/traces.py"):  # as in the working tree, committed or not
        shutil.copy(ROOT / changed, clone / changed)
    return clone


def _without_trace_settings(tmp_path: Path) -> dict[str, str]:
    # Run as a top-level make would be: under `make test` the parent's MAKELEVEL makes this one a sub-make
    # that prints "Entering directory" lines.
    inherited = {traces.VARIABLE, "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    environment = {key: value for key, value in os.environ.items() if key not in inherited}
    return environment | {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_make_test_in_a_clone_without_traces_stops_first_with_one_line(tmp_path):
    clone = _clone(tmp_path)  # beside it no shared/data, and an empty user cache
    started = time.monotonic()
    result = subprocess.run(
        ["make", "test"], cwd=clone, env=_without_trace_settings(tmp_path), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert result.returncode != 0
    assert result.stdout == ""
    ours = [line for line in result.stderr.splitlines() if not line.startswith("make: ***")]
    assert len(ours) == 1, result.stderr
    assert ours[0].startswith("error: the public traces the tests read are missing: ")
    assert "Run `make traces`" in ours[0] and "set GPU_TRACES_DIR" in ours[0]
    assert not (clone / ".venv").exists()  # nothing installed, linted or built


def test_make_finds_the_traces_in_shared_data_beside_the_clone_under_ci(tmp_path):
    clone = _clone(tmp_path)
    for entry in traces.REGISTRY:  # presence is what the first check looks at; verify checks the hashes
        (tmp_path / "shared" / "data" / entry.name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "shared" / "data" / entry.name).touch()
    environment = _without_trace_settings(tmp_path) | {"CI": "true"}
    result = subprocess.run(
        ["make", "traces-present"], cwd=clone, env=environment, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
