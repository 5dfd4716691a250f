# syntax=docker/dockerfile:1
# One image for the three processes of kruntimes (SPEC §1, §4): `kruntimes scheduler`,
# `kruntimes controller` and `kruntimes runtimed` (each Deployment or Runtime Pod sets
# its command). Multi-stage: the build stage has pip and compilers' leftovers, the
# runtime stage only the virtual environment. It runs as a non-root user and writes
# nothing to its root filesystem, so `readOnlyRootFilesystem: true` works as long as
# the pod mounts writable volumes where the process writes: /tmp, the journal spool
# (/var/lib/kruntimes) and runtimed's work directory (/var/lib/kruntimes/runs).
#
#   docker build -t ghcr.io/kruntimes/kruntimes:0.1.0 .

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/kruntimes
COPY pyproject.toml README.md ./
COPY kruntimes ./kruntimes
COPY replay ./replay
COPY migrations ./migrations
RUN /opt/kruntimes/bin/pip install ".[postgres]" \
 && /opt/kruntimes/bin/python -m compileall -q /opt/kruntimes

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kruntimes" \
      org.opencontainers.image.description="Scheduler, Runtime controller and runtimed for Runs on pools of Runtime Pods" \
      org.opencontainers.image.licenses="Apache-2.0"
# 65532 is the conventional "nonroot" uid; the manifests' securityContext uses it too.
RUN groupadd --system --gid 65532 kruntimes \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/kruntimes --no-create-home \
      --shell /usr/sbin/nologin kruntimes \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/kruntimes /var/lib/kruntimes/runs
COPY --from=build /opt/kruntimes /opt/kruntimes
# Bytecode was compiled at build time; nothing tries to write it at run time.
ENV PATH=/opt/kruntimes/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KRUNTIMES_WORK_DIR=/var/lib/kruntimes/runs
WORKDIR /var/lib/kruntimes
USER 65532:65532
ENTRYPOINT ["kruntimes"]
CMD ["--help"]
