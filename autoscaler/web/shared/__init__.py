"""What both ports run:

- ``http_server``: aiohttp's server answering what its parser refuses with ``metav1.Status`` (414, 431, 501,
  400) and no ``Server`` header; ``autoscaler.throttled_log`` bounds how often strangers are logged.
- ``middleware``: Kubernetes-style errors, request metrics and authentication for every request.
- ``responses``: the Kubernetes documents (discovery, ``metav1.Status``, metric lists).
- ``probes``: ``/healthz``, ``/livez``, ``/readyz`` (state in ``readiness``) and ``/metrics``
  (``self_metrics``: the service's own registry).
- ``keys``: the typed app state the routes share.
- ``demo_pki``: the demo's local CA and kubeconfig, repaired when damaged (it asks the demo's own API).
"""
