FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml ./
COPY controlplane ./controlplane
COPY apps ./apps
COPY pdproxy ./pdproxy
COPY simcluster ./simcluster
RUN pip install --no-cache-dir .
COPY . .
ENV PYTHONUNBUFFERED=1
