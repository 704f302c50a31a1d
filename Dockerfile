# One image for every Parkway process (docker-compose.yml picks the command): parkway migrate, uvicorn,
# celery worker, celery beat, celery flower.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package needs: the build context also holds .venv, var/ and test artifacts.
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY parkway ./parkway
COPY models ./models
COPY tasks ./tasks
COPY beat ./beat
COPY api ./api
COPY migrations ./migrations
COPY examples ./examples
RUN pip install ".[otel]" && cd / && rm -rf /src

# A non-root user owning /data: beat's schedule file and the run workspaces (a volume) live there.
WORKDIR /data
RUN useradd --uid 10001 --create-home --shell /usr/sbin/nologin parkway \
    && mkdir -p /data/workspaces \
    && chown -R parkway:parkway /data
ENV PARKWAY_HOME=/data \
    PARKWAY_WORKSPACE_DIR=/data/workspaces
USER parkway

EXPOSE 8000 5555
CMD ["uvicorn", "api.app:app", "--host", "0.0.0.0", "--port", "8000"]
