# syntax=docker/dockerfile:1
# Build stage: compilers and pip caches stay here.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
COPY forecast ./forecast
COPY adapters ./adapters
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# Runtime stage: the wheels only, a non-root user, no build tools.
FROM python:3.11-slim-bookworm
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin autoscaler
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
WORKDIR /var/lib/gpu-autoscaler
ENV PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
# 6443: external metrics API (HTTPS); 8080: probes, /metrics, inspection API (HTTP)
EXPOSE 6443 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/livez', timeout=4)"]
ENTRYPOINT ["gpu-autoscaler"]
CMD ["serve", "--config", "/etc/gpu-autoscaler/config.yaml", "--state-dir", "/tmp/gpu-autoscaler"]
