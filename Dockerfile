FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml ./
COPY controlplane ./controlplane
COPY apps ./apps
COPY pdproxy ./pdproxy
COPY simcluster ./simcluster
COPY plainyaml ./plainyaml
COPY sshexec ./sshexec
COPY pdcpcli ./pdcpcli
RUN pip install --no-cache-dir .
# .dockerignore keeps the developer's data/ (database, secrets.key), .git and .venv out of the image.
COPY . .
# The app writes only to PDCP_DATA_DIR; a named volume mounted there starts with this owner.
RUN useradd --system --create-home --uid 10001 pdcp && mkdir -p /data && chown pdcp:pdcp /data
ENV PYTHONUNBUFFERED=1 PDCP_DATA_DIR=/data
USER pdcp
