# One image for web (gunicorn), worker and beat (celery), as cookiecutter-django does.
# The base is pinned by digest (the agent image's: deploy/kubernetes/Dockerfile.agent) and the
# dependencies by server-requirements.lock (`make server-lock`, every wheel's sha256), so a
# rebuild installs the same packages.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

RUN useradd --create-home --uid 1000 fleet
COPY pyproject.toml README.md server-requirements.lock ./
COPY fleet_agent ./fleet_agent
RUN pip install --require-hashes -r server-requirements.lock && pip install --no-deps .
COPY . .
# Static files are collected at build time; settings need no secret for that.
# The agent wheel served at /agent/dist/ is built here too (never inside a request); the
# install script embeds its sha256.
RUN DEBUG=true python manage.py collectstatic --noinput -v0
RUN DEBUG=true python manage.py build_agent_wheel && mkdir -p /app/var/kb && chown -R fleet /app/var
USER fleet

EXPOSE 8000
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--timeout", "60"]
