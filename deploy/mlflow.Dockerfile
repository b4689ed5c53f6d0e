# The MLflow tracking server of deploy/compose.yaml: MLflow with the two drivers the official
# image lacks, psycopg2 (the PostgreSQL backend store) and boto3 (S3 / MinIO artifacts).
# Built by `docker compose -f deploy/compose.yaml up --build`; runs as a non-root user.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The same MLflow as the project's own pin (mlflow==3.17.*): client and server agree.  psycopg2
# and SQLAlchemy are the versions tests/test_sweeper/tracking/test_postgres_tracking.py runs an `mlflow server` on a
# real PostgreSQL with; compose.yaml's URI names the driver (postgresql+psycopg2://).
RUN pip install mlflow==3.17.2 psycopg2-binary==2.9.13 sqlalchemy==2.1.9 boto3==1.44.5 \
    && useradd --uid 1000 --create-home --shell /usr/sbin/nologin mlflow

USER mlflow
WORKDIR /home/mlflow
EXPOSE 5000
CMD ["mlflow", "server", "--help"]
