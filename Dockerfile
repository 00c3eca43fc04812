# signoff: slim image, production mode, non-root, installed from the hash-checked lock;
# migrations on start, then the HTTP server. tests/test_dockerfile.py builds exactly what the
# COPY lines copy and runs the CMD to a healthy /healthz, so a package left out fails CI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# Every dependency exactly as locked, each file checked against its hash; nothing resolved here.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

COPY pyproject.toml README.md ./
COPY agent ./agent
COPY tools ./tools
COPY storage ./storage
COPY sandbox ./sandbox
COPY shopify ./shopify
COPY bot ./bot
RUN pip install --no-deps . && useradd --create-home --uid 10001 signoff \
    && mkdir -p /data /anchors && chown signoff /data /anchors

USER signoff
# Production (no demo data or staff, no development flag); the database and the app's own
# audit checkpoints and key live on volumes. The app writes /anchors, so it is no anchor against
# whoever controls this host: set SIGNOFF_AUDIT_SIGNER (the signer as another user, outside the
# container) and SIGNOFF_AUDIT_PUBLISH (off-host, append-only); README, "Security".
ENV SIGNOFF_ENV=production \
    SIGNOFF_DATABASE_URL=sqlite+aiosqlite:////data/signoff.db \
    SIGNOFF_AUDIT_CHECKPOINT_FILE=/anchors/audit-checkpoints.jsonl \
    SIGNOFF_AUDIT_KEY_FILE=/anchors/audit-key.pem
VOLUME ["/data", "/anchors"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
CMD ["sh", "-c", "signoff db upgrade && exec signoff serve --host 0.0.0.0 --port 8080"]
