"""The public traces the tests read: where they come from, their pinned hashes, and where they are kept.

Every file is fetched with pooch from its upstream repository at a pinned commit; pooch checks the
download against ``sha256`` (the upstream file's bytes). The cache keeps the CSV gzip-compressed under
the layout of ``../shared/data`` (see its README), and ``csv_sha256`` pins the CSV inside: for a plain
CSV upstream it is the same hash; the GenAI files are ``.tar.gz`` archives of one CSV each.

The cache directory is ``$GPU_TRACES_DIR``; unset, it is ``../shared/data`` beside the clone when that
exists (CI and offline machines), else the user cache (``$XDG_CACHE_HOME/gpu-autoscaler/traces``,
``~/.cache/gpu-autoscaler/traces`` by default). The name must not start with ``GPU_AUTOSCALER_``: the
service reads those variables as settings.

    .venv/bin/python -m tests.traces fetch    # download what is missing (make traces)
    .venv/bin/python -m tests.traces verify   # check every cached file against its pinned hash
    python3 -m tests.traces check             # are they all there? (make test's first step, before any install)

This module imports only the standard library until it downloads (pooch then), so that ``check`` runs
with the system's python3 in a fresh clone, with the one lookup rule the tests use.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import tarfile
import tempfile
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "GPU_TRACES_DIR"
FETCH_COMMAND = "make traces"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

_ALIBABA = "https://raw.githubusercontent.com/alibaba/clusterdata/7a6c496e4f4b6ce6150be8f881cb051bf2abff42"
_HELIOS = (
    "https://raw.githubusercontent.com/S-Lab-System-Group/HeliosArtifact/bdaae109c21f8038a2331e6a23a582d5ae78ab5b/"
    + urllib.parse.quote("analysis/2_cluster characterization/Earth_vcs")
)


@dataclass(frozen=True)
class TraceFile:
    name: str  # path inside the cache directory (as in ../shared/data)
    url: str  # the upstream file at a pinned commit
    sha256: str  # of the upstream file as downloaded
    csv_sha256: str  # of the CSV the cache holds gzip-compressed

    @property
    def archived(self) -> bool:
        return self.url.endswith(".tar.gz")


def _plain(name: str, url: str, sha256: str) -> TraceFile:
    return TraceFile(name, url, sha256, sha256)


# Helios Earth virtual clusters: the per-minute cluster sequences (MIT; the Helios data CC-BY 4.0).
_HELIOS_VCS = {
    "vc3sl": "bed4c00def988d7661e579b07e4ead3c0324e7709a5682da32caa63c4d892bf8",
    "vc6YE": "a3f5604c54c0dcf630cc7c5c4f4b9194ee64276dc3697f748a159ea0a3ac937a",
    "vc8Sj": "e264563f228765b06c3c12a50644955adac286c99e9c73ec0294d0deb80a4282",
    "vcJLV": "457307875a07db4b771c9a665fd9c171b16ff8832ec1b40056bd47b7d06f3b49",
    "vcJkd": "6543a83fd69b0e85ebb34d2a35a2e0a81d747db0a255917845b343c34b1df0a3",
    "vcLJZ": "e70279198452ec2518774285e9b2e435d4aeb26f019036897446ecba295529fe",
    "vcMod": "e16e824d75051409c08228cf65ead8e2609dc607f26216129b7c38b5d3d2e0ef",
    "vcSoL": "4f0544ebde6712a5e9110a7c4a54a5ebafd86a543fa6d2c4baf48d455bf161c2",
    "vcTJs": "9d29704b3ce07af9ee96af51cd516a7b7f6d9f0b3523c9d479f44c517dd91fd3",
    "vccaA": "b60fe669a9c92a1437e61cf6b4a0b14574587d19149b20e9445f12b965e4b8ab",
    "vcdI0": "8af4778084bb755b3b5b106daf46603ae33993a5cc463b094ba2c1bfe2d63ef6",
    "vcgkz": "4933b4cd750b174fb25ab6d6a03702f2e945a4200bc68047a41aab74efa82dbb",
    "vchbv": "fed830fdf39248e46b3078e47dd7518203afd826c55d5a0d136cc761050c3e7b",
    "vcira": "3c3bb05f0df42035c30c51f90b0b8d8796657bac0f9bf5087f773fb1eb6438db",
    "vcpDC": "b97626a5c0399ba269150364df94a855d29decf986c0209040a90571bb67fded",
    "vcvlY": "78ccae5d844f89cd183bd3fd260363285d06e04441c581aea19dd9b1c54c7657",
}
HELIOS_VCS = tuple(_HELIOS_VCS)

# The files the tests and benchmarks read (Alibaba: "for research or study purpose", see its README).
REGISTRY: tuple[TraceFile, ...] = (
    *(
        _plain(f"helios_earth_2020/earth_{vc}_cluster_sequence_vc.csv.gz", f"{_HELIOS}/{vc}/cluster_sequence_vc.csv", h)
        for vc, h in _HELIOS_VCS.items()
    ),
    _plain(
        "alibaba_gpu_v2023/openb_pod_list_default.csv.gz",
        f"{_ALIBABA}/cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
        "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
    ),
    _plain(
        "alibaba_genai_v2026/lora_request_trace.csv.gz",
        f"{_ALIBABA}/cluster-trace-v2026-GenAI/lora_request_trace.csv",
        "263fb88f1095f62d360cf89ded8cfc24fa2c5d111c1b16e7aaa9ccbfc4b37d78",
    ),
    TraceFile(
        "alibaba_genai_v2026/pod_gpu_duty_cycle_anon.csv.gz",
        f"{_ALIBABA}/cluster-trace-v2026-GenAI/pod_gpu_duty_cycle_anon.tar.gz",
        "c4070218189b2811995c30dd9fefb8a793a83a54dccebe7b41cab2d123916855",
        "b3a91d9bd9141156e66da6b8d34520602246ee043ac60b0d2172e689a3919f99",
    ),
    TraceFile(
        "alibaba_genai_v2026/qps.csv.gz",
        f"{_ALIBABA}/cluster-trace-v2026-GenAI/qps.tar.gz",
        "6bd1a21e3f916740df1e768fc43346148f1598b15fcc68c658a8faf1f87461c6",
        "d09dab823927592e4767ada367314be761553ba2a44e49a5825d31651663d2de",
    ),
    _plain(
        "alibaba_dlrm_v2025/disaggregated_DLRM_trace.csv.gz",
        f"{_ALIBABA}/cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv",
        "fb17bc4b3f412d5280f70f04a1bdf2adfc4429d1e61237a5b106e86206414295",
    ),
)
BY_NAME = {entry.name: entry for entry in REGISTRY}


class TracesMissing(Exception):
    """Trace files the registry lists are not in the cache directory."""


def cache_dir() -> Path:
    """``$GPU_TRACES_DIR``, else ``../shared/data`` beside the clone if it exists, else the user cache."""
    configured = os.environ.get(VARIABLE)
    if configured:
        return Path(configured).expanduser()
    if SHARED.is_dir():
        return SHARED
    return user_cache()


def user_cache() -> Path:
    """The XDG user cache directory's ``gpu-autoscaler/traces``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "gpu-autoscaler" / "traces"


def missing(names: Iterable[str] | None = None) -> list[str]:
    """The registered files (all, or ``names``) absent from the cache directory."""
    directory = cache_dir()
    return [name for name in (names or BY_NAME) if not (directory / name).is_file()]


def missing_message(absent: Sequence[str]) -> str:
    """The one message for missing traces: where they were looked for, and the two ways to get them."""
    directory = cache_dir()
    where = f"set by {VARIABLE}" if os.environ.get(VARIABLE) else f"the default, as {VARIABLE} is unset"
    shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
    return (
        f"the public traces the tests read are missing: {shown} not in {directory} ({where}). "
        f"Run `{FETCH_COMMAND}` to download them (about 58 MB from GitHub, each checked against its pinned sha256), "
        f"or set {VARIABLE} to a directory that holds them (CI: ../shared/data)."
    )


def path(name: str) -> Path:
    """The cached file ``name`` (a registry name); ``TracesMissing`` with the one message if absent."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not in the trace registry (tests/traces.py)")
    file = cache_dir() / name
    if not file.is_file():
        raise TracesMissing(missing_message([name]))
    return file


def csv_digest(file: Path) -> str:
    """sha256 of the CSV inside a cached ``.csv.gz`` file."""
    digest = hashlib.sha256()
    with gzip.open(file, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify(entries: Iterable[TraceFile] = REGISTRY) -> list[str]:
    """Problems with the cached files (missing, or a CSV whose hash is not the pinned one)."""
    problems = []
    for entry in entries:
        file = cache_dir() / entry.name
        if not file.is_file():
            problems.append(f"{entry.name}: missing")
        elif (found := csv_digest(file)) != entry.csv_sha256:
            problems.append(f"{entry.name}: sha256 of the CSV is {found}, pinned {entry.csv_sha256}")
    return problems


def _csv_bytes(entry: TraceFile, downloaded: Path) -> bytes:
    if not entry.archived:
        return downloaded.read_bytes()
    with tarfile.open(downloaded, "r:gz") as archive:
        members = [member for member in archive.getmembers() if member.isfile()]
        if len(members) != 1:
            raise ValueError(f"{entry.url} holds {len(members)} files; one CSV expected")
        stream = archive.extractfile(members[0])
        assert stream is not None
        return stream.read()


def store(entry: TraceFile, downloaded: Path, directory: Path) -> Path:
    """Write the CSV of a downloaded upstream file gzip-compressed into the cache, checking its hash."""
    content = _csv_bytes(entry, downloaded)
    if (found := hashlib.sha256(content).hexdigest()) != entry.csv_sha256:
        raise ValueError(f"{entry.url}: the CSV's sha256 is {found}, pinned {entry.csv_sha256}")
    target = directory / entry.name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with partial.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as compressed:
        compressed.write(content)
    partial.replace(target)
    return target


def fetch(entries: Iterable[TraceFile] = REGISTRY) -> list[Path]:
    """Download the missing files from their upstreams (pooch checks each against its pinned sha256)."""
    import pooch

    pooch.get_logger().setLevel("WARNING")  # its "Downloading data from ..." per file; we print "fetched"
    directory = cache_dir()
    written = []
    for entry in entries:
        if (directory / entry.name).is_file():
            continue
        with tempfile.TemporaryDirectory() as downloads:
            downloaded = pooch.retrieve(
                entry.url, known_hash=f"sha256:{entry.sha256}", path=downloads, progressbar=False
            )
            written.append(store(entry, Path(downloaded), directory))
    return written


class DownloadFailed(Exception):
    """A registered file could not be downloaded or stored; the message is the one line to show."""


def fetch_or_explain(entries: Iterable[TraceFile] = REGISTRY) -> list[Path]:
    """``fetch``, with a failure (no network, a proxy refusing, a changed upstream) as one line: what
    failed, and the two ways on without a download."""
    written: list[Path] = []
    for entry in entries:
        try:
            written += fetch([entry])
        except (OSError, ValueError, tarfile.TarError) as error:  # requests' errors are OSErrors
            host = urllib.parse.urlsplit(entry.url).hostname
            raise DownloadFailed(
                f"cannot download {entry.name} from {host} ({_root_cause(error)}). Without network access, set "
                f"{VARIABLE} to a directory that holds the traces (../shared/data beside the clone has them on CI "
                f"and shared machines, and is used when it exists), or copy them into {cache_dir()}"
            ) from error
    return written


def _root_cause(error: BaseException) -> str:
    """The innermost exception of a chain (a refused connection, a failed name lookup), bounded."""
    while (inner := error.__cause__ or error.__context__) is not None:
        error = inner
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:160]}{'...' if len(text) > 160 else ''}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.traces", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("fetch", "verify", "where", "check"))
    command = parser.parse_args(argv).command
    if command == "where":
        print(cache_dir())
        return 0
    if command == "check":  # presence only, in a second: the hashes are verify's
        if absent := missing():
            print(f"error: {missing_message(absent)}", file=sys.stderr)
            return 1
        return 0
    if command == "fetch":
        try:
            for written in fetch_or_explain():
                print(f"fetched {written}")
        except DownloadFailed as failure:
            print(f"error: {failure}", file=sys.stderr)
            return 1
    problems = verify()
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{len(REGISTRY)} trace files in {cache_dir()} match their pinned sha256")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
