# anvil as one self-contained image: Locust (pinned), anvil installed from this checkout, the
# scenarios and locustfiles. Nothing is installed when a pod starts, so a cluster without
# internet access runs it (the Helm chart's pip_packages would need PyPI from every pod).
#
#   docker build -t anvil:0.1.0 .
#   docker run --rm anvil:0.1.0 anvil demo
#   docker run --rm -p 8089:8089 anvil:0.1.0 locust -f /app/locustfiles/chat.py -H URL
#   docker run --rm anvil:0.1.0 --worker --master-host MASTER   (leading "-": locust's options)
#
# Keep ANVIL_VERSION = pyproject.toml's version and LOCUST_VERSION = the Locust that the
# development venv resolves (tests/deploy/test_deploy.py fails when they drift apart).
FROM python:3.11-slim

ARG ANVIL_VERSION=0.1.0
ARG LOCUST_VERSION=2.47.0

LABEL org.opencontainers.image.title="anvil" \
      org.opencontainers.image.description="Locust-based load generator for LLM serving endpoints" \
      org.opencontainers.image.version="${ANVIL_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LOCUST_LOCUSTFILE=/app/locustfiles/chat.py

# the package, built from a copy of the checkout that is removed afterwards (so no source
# tree shadows the installed package); README.md is pyproject.toml's readme, needed to
# build. Into the system interpreter, so `locust` and `anvil` are /usr/local/bin/* (the
# Helm chart's entrypoint execs /usr/local/bin/locust).
WORKDIR /tmp/anvil-src
COPY pyproject.toml README.md ./
COPY anvil_metrics ./anvil_metrics
RUN pip install "locust==${LOCUST_VERSION}" . && rm -rf /tmp/anvil-src

WORKDIR /app
COPY scenarios ./scenarios
COPY locustfiles ./locustfiles
COPY deploy/docker/entrypoint.sh /usr/local/bin/anvil-entrypoint
# `anvil demo` looks for scenarios/smoke.toml beside the package's folder (a checkout's
# layout); an installed package has site-packages there, so point that at /app/scenarios
RUN ln -s /app/scenarios "$(python -c 'import anvil_metrics as a, pathlib as p; print(p.Path(a.__file__).resolve().parent.parent)')/scenarios" \
    && chmod 0755 /usr/local/bin/anvil-entrypoint \
    && groupadd --gid 10001 anvil \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/anvil anvil \
    && mkdir -p /data/results && chown -R 10001:10001 /data

# numeric, so Kubernetes' runAsNonRoot can check it; runs write results/ under /data
USER 10001:10001
WORKDIR /data

# 8089: Locust's web UI (anvil's /anvil/ page and downloads); 5557: master <-> workers
EXPOSE 8089 5557

ENTRYPOINT ["/usr/local/bin/anvil-entrypoint"]
CMD ["anvil", "--help"]
