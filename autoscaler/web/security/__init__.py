"""TLS and who a caller is, for every port:

- ``auth`` and ``kubernetes_auth``: who a caller is (client certificates, TokenReview) and what it may read
  (SubjectAccessReview), with bounded caches.
- ``tls`` and ``certificates``: serving certificates (checked at start, reloaded when rotated) and cipher
  suites; ``tls_accept`` runs the secure port's handshakes so refused client certificates are counted.
"""
