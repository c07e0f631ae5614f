# A naive, hand-written Dockerfile for what the PyTorch CI cell holds (PyTorch 2.1.2 with CUDA 12.1 from PyPI's
# wheels, Python 3.11, JupyterLab and the package set), on the same base: the yardstick scripts/bench/cold-build.sh
# measures `invoke build` against. Plain pip, the package set unpinned (only the framework's versions named, as a user
# asking for this PyTorch writes them), no lock, no hashes, no cache mount. Not a cell: nothing renders or tests it.
FROM dlimages/base:debian12
ARG APT_MIRROR
ARG APT_SECURITY_MIRROR
RUN if [ -n "$APT_MIRROR" ]; then \
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n\n' \
            "$APT_MIRROR" "bookworm bookworm-updates" /usr/share/keyrings/debian-archive-keyring.gpg \
            "$APT_SECURITY_MIRROR" bookworm-security /usr/share/keyrings/debian-archive-keyring.gpg \
            > /etc/apt/sources.list.d/debian.sources; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates git zsh tini \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=secret,id=pip_ca \
    python3 -m venv /opt/venv \
 && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 && /opt/venv/bin/pip install --no-cache-dir torch==2.1.2 torchvision==0.16.2 torchaudio==2.1.2 \
 && /opt/venv/bin/pip install --no-cache-dir jupyterlab ipykernel numpy pandas scipy opencv-python-headless pillow \
        matplotlib tqdm pyyaml requests
ENV PATH=/opt/venv/bin:$PATH
CMD ["jupyter", "lab", "--ip=0.0.0.0"]
