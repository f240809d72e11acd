"""The gRPC port's TLS as KEDA's trigger keys use it: ``caCert``, ``tlsClientCert``, ``tlsClientKey``."""

from __future__ import annotations

import socket
import threading

import grpc
import pytest

from autoscaler.app.api_loop import on_own_loop
from autoscaler.app.serving import GRPC_THREAD
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.server import serving_grpc
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.web.security.certificates import CertificateFileError, generate_ca, issue_certificate
from autoscaler.web.security.tls import ServingFiles
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.conftest import NOW, SettableClock, fixed_snapshot
from tests.eventually import eventually
from tests.keda.conftest import Scaler, grpc_settings, ref


async def is_active(channel: grpc.aio.Channel) -> bool:
    return (await ExternalScalerStub(channel).IsActive(ref(), timeout=10)).result


async def refused(channel: grpc.aio.Channel) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await is_active(channel)
    return raised.value


async def test_a_client_certificate_of_the_trusted_ca_is_accepted(scaler: Scaler):
    async with scaler.channel(scaler.pki.alice) as channel:
        assert await is_active(channel) is True


@pytest.mark.parametrize("client", ["none", "stranger", "expired"])
async def test_mutual_tls_refuses_a_missing_untrusted_or_expired_client_certificate(scaler: Scaler, client):
    chosen = None if client == "none" else getattr(scaler.pki, client)
    async with scaler.channel(chosen) as channel:
        error = await refused(channel)
    # The handshake fails, so the call never reaches the service: gRPC says the server is unavailable.
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert scaler.sample("gpu_autoscaler_grpc_requests_total", {"method": "IsActive", "code": "OK"}) is None


async def test_a_client_trusting_another_ca_refuses_the_server(scaler: Scaler, tmp_path):
    other = generate_ca("some other CA")
    other.write(tmp_path / "other.crt", tmp_path / "other.key")
    async with scaler.channel(scaler.pki.alice, ca=tmp_path / "other.crt") as channel:
        error = await refused(channel)
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_plaintext_is_refused(scaler: Scaler):
    async with grpc.aio.insecure_channel(scaler.address) as channel:
        error = await refused(channel)
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_without_a_client_ca_tls_needs_no_client_certificate(pki):
    provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW))
    serving = ServingFiles(pki.serving_cert, pki.serving_key)
    settings = grpc_settings(pki, mutual=False)
    async with serving_grpc(settings, provider=provider, self_metrics=SelfMetrics(), serving=serving) as listening:
        credentials = grpc.ssl_channel_credentials(pki.client_ca.read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{listening.port}", credentials) as channel:
            assert await is_active(channel) is True


async def test_a_rotated_serving_certificate_is_served_from_the_next_handshake(pki, tmp_path):
    cert, key = tmp_path / "serving.crt", tmp_path / "serving.key"
    first_ca, second_ca = generate_ca("first CA"), generate_ca("second CA")
    first_ca.write(tmp_path / "first.crt", tmp_path / "first.key")
    second_ca.write(tmp_path / "second.crt", tmp_path / "second.key")
    issue_certificate(first_ca, "gpu-autoscaler", hosts=("127.0.0.1",), server=True).write(cert, key)
    provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW))
    async with serving_grpc(
        grpc_settings(pki), provider=provider, self_metrics=SelfMetrics(), serving=ServingFiles(cert, key)
    ) as listening:
        address = f"127.0.0.1:{listening.port}"

        def channel(ca_name: str) -> grpc.aio.Channel:
            credentials = grpc.ssl_channel_credentials(
                (tmp_path / ca_name).read_bytes(), pki.alice.key.read_bytes(), pki.alice.cert.read_bytes()
            )
            return grpc.aio.secure_channel(address, credentials)

        async with channel("first.crt") as first:
            assert await is_active(first) is True
        issue_certificate(second_ca, "gpu-autoscaler", hosts=("127.0.0.1",), server=True).write(cert, key)

        async def second_ca_accepted() -> bool:
            async with channel("second.crt") as second:
                return await is_active(second)

        await eventually(
            second_ca_accepted, message="the rotated certificate to be served", retrying_on=(grpc.aio.AioRpcError,)
        )
        async with channel("first.crt") as first:
            assert (await refused(first)).code() == grpc.StatusCode.UNAVAILABLE


async def test_a_port_in_use_is_an_error_naming_the_setting(pki):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW))
        serving = ServingFiles(pki.serving_cert, pki.serving_key)
        served = serving_grpc(
            grpc_settings(pki, grpc_port=port), provider=provider, self_metrics=SelfMetrics(), serving=serving
        )
        with pytest.raises(OSError, match=rf"^server.grpc_port: cannot listen on 127.0.0.1:{port} "):
            async with on_own_loop(GRPC_THREAD, served):  # as serve starts it
                pass
    assert not any(thread.name == GRPC_THREAD for thread in threading.enumerate()), "its thread outlived the error"


async def test_an_unusable_client_ca_file_is_an_error_naming_the_setting(pki, tmp_path):
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate")
    provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW))
    serving = ServingFiles(pki.serving_cert, pki.serving_key)
    settings = grpc_settings(pki).model_copy(update={"grpc_client_ca_file": bad})
    with pytest.raises(CertificateFileError) as raised:
        async with serving_grpc(settings, provider=provider, self_metrics=SelfMetrics(), serving=serving):
            pass
    assert str(raised.value) == f"server.grpc_client_ca_file {bad}: not a PEM certificate (it does not parse)"
