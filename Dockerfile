# signoff: slim image, non-root, migrations on start, then the HTTP server.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY agent ./agent
COPY tools ./tools
COPY storage ./storage
COPY bot ./bot
RUN pip install . && useradd --create-home --uid 10001 signoff && mkdir -p /data && chown signoff /data

USER signoff
ENV SIGNOFF_DATABASE_URL=sqlite+aiosqlite:////data/signoff.db
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
CMD ["sh", "-c", "signoff db upgrade && exec signoff serve --host 0.0.0.0 --port 8080"]
