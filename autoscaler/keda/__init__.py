"""KEDA's external scaler over gRPC (``server.grpc_port``), one concept per module:

- ``server``: the gRPC port (TLS or mutual TLS with the secure port's serving certificate, followed
  when rotated), started and stopped by ``app.serving`` beside the HTTP ports.
- ``interceptor``: request metrics and internal-error handling for every call (``web.middleware``'s
  counterpart).
- ``scaler``: the ``ExternalScaler`` service, answered from the provider's snapshot; ``metadata``
  reads a trigger's ``scalerMetadata``.
- ``externalscaler.proto``: KEDA's interface, vendored with its attribution; ``externalscaler_pb2``
  and ``externalscaler_pb2_grpc`` (and their ``.pyi``) are generated from it by
  ``scripts/generate-keda-stubs.sh`` and committed (a test checks they are current).
"""
