"""Advice on a failed build, read from real output: every fixture below is what a real build printed on the CI
machine (BuildKit 0.13.2, `docker buildx build --progress=plain`), cut only where noted. How each was made:

- BASE_*: `FROM 127.0.0.1:1/library/ubuntu:22.04` (nothing listens), `FROM ubuntu:22.04` (Docker Hub does not
  resolve there), `FROM 127.0.0.1:5391/mirror/dlimages/base:debian12` against an empty local registry
  (.ci/registry.sh), the same on one with basic auth (:5392), `FROM mirror.invalid/docker.io/library/ubuntu:22.04`
  (a registry mirror that does not resolve), `FROM dlimages/base:<a tag not made here>`.
- APT_*: on dlimages/base:debian12, Debian's sources pointed at http://127.0.0.1:9/debian, at http://apt.invalid/debian,
  and at http://deb.example.org/debian with `--network none`, then `apt-get update && apt-get install curl zsh`.
- PIP_REFUSED: the real cell cuda12.1-torch2.1.2-py3.11-runtime through plan_build + run_build with
  PIP_INDEX_URL=http://127.0.0.1:9/simple/ (the apt step's 500 lines of output are cut).
- PIP_TLS, TORCH_*, TLS_THEN_TORCH_INDEX, HASH_MISMATCH, PIN_MISSING: `pip download` in a build FROM the PyTorch
  image, behind the machine's TLS-intercepting proxy (with its CA as the pip_ca secret, except where TLS fails).
- DISK_FULL: `dd` into a 1 MiB tmpfs mount; UNKNOWN: a step that prints a line and exits 3.
- PIP_CHECK: `invoke build` of the real cell cuda12.1-torch2.1.2-py3.11-runtime in a clone whose requirements.lock pins
  pytz 2019.3 (tests/image/test_pip_check.py); the step's 227 lines of Collecting/Downloading are cut, and so are
  the builder's own progress lines.

The DNS resolver's address in the "no such host" lines is replaced by 127.0.0.53 and trailing spaces are dropped;
nothing else is edited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from pip._internal.models.index import PyPI

from dlimages.build.advice import MIRROR_BASES, Attempt, Diagnosis, Remedies, diagnose, offline_cell
from dlimages.model.cells import Cell, expand
from dlimages.model.spec import Matrix

CellLookup = Callable[[str, str], Cell]
# PyPI's hosts as pip itself names them: the fixtures hold @PYPI@ and @PYPI_FILES@ where the real output named them.
PYPI_HOST, PYPI_FILES = PyPI.netloc, PyPI.file_storage_domain


def real(text: str) -> str:
    return text.replace("@PYPI_FILES@", PYPI_FILES).replace("@PYPI@", PYPI_HOST)


# --- real output ------------------------------------------------------------------------------------------------------

BASE_REFUSED = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 84B done
#1 DONE 0.0s

#2 [internal] load metadata for 127.0.0.1:1/library/ubuntu:22.04
#2 ERROR: failed to do request: Head "https://127.0.0.1:1/v2/library/ubuntu/manifests/22.04": dial tcp 127.0.0.1:1: connect: connection refused
------
 > [internal] load metadata for 127.0.0.1:1/library/ubuntu:22.04:
------
Dockerfile:1
--------------------
   1 | >>> FROM 127.0.0.1:1/library/ubuntu:22.04
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: 127.0.0.1:1/library/ubuntu:22.04: failed to resolve source metadata for 127.0.0.1:1/library/ubuntu:22.04: failed to do request: Head "https://127.0.0.1:1/v2/library/ubuntu/manifests/22.04": dial tcp 127.0.0.1:1: connect: connection refused
""")  # noqa: E501


BASE_DOCKER_HUB = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 64B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/library/ubuntu:22.04
#2 ERROR: failed to do request: Head "https://registry-1.docker.io/v2/library/ubuntu/manifests/22.04": dial tcp: lookup registry-1.docker.io on 127.0.0.53:53: no such host
------
 > [internal] load metadata for docker.io/library/ubuntu:22.04:
------
Dockerfile:1
--------------------
   1 | >>> FROM ubuntu:22.04
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: ubuntu:22.04: failed to resolve source metadata for docker.io/library/ubuntu:22.04: failed to do request: Head "https://registry-1.docker.io/v2/library/ubuntu/manifests/22.04": dial tcp: lookup registry-1.docker.io on 127.0.0.53:53: no such host
""")  # noqa: E501


BASE_NOT_FOUND = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 96B 0.0s done
#1 DONE 0.0s

#2 [internal] load metadata for 127.0.0.1:5391/mirror/dlimages/base:debian12
#2 ERROR: 127.0.0.1:5391/mirror/dlimages/base:debian12: not found
------
 > [internal] load metadata for 127.0.0.1:5391/mirror/dlimages/base:debian12:
------
Dockerfile:1
--------------------
   1 | >>> FROM 127.0.0.1:5391/mirror/dlimages/base:debian12
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: 127.0.0.1:5391/mirror/dlimages/base:debian12: failed to resolve source metadata for 127.0.0.1:5391/mirror/dlimages/base:debian12: 127.0.0.1:5391/mirror/dlimages/base:debian12: not found
""")  # noqa: E501


BASE_UNAUTHORIZED = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 96B 0.0s done
#1 DONE 0.0s

#2 [internal] load metadata for 127.0.0.1:5392/mirror/dlimages/base:debian12
#2 ERROR: unexpected status from HEAD request to http://127.0.0.1:5392/v2/mirror/dlimages/base/manifests/debian12: 401 Unauthorized
------
 > [internal] load metadata for 127.0.0.1:5392/mirror/dlimages/base:debian12:
------
Dockerfile:1
--------------------
   1 | >>> FROM 127.0.0.1:5392/mirror/dlimages/base:debian12
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: 127.0.0.1:5392/mirror/dlimages/base:debian12: failed to resolve source metadata for 127.0.0.1:5392/mirror/dlimages/base:debian12: unexpected status from HEAD request to http://127.0.0.1:5392/v2/mirror/dlimages/base/manifests/debian12: 401 Unauthorized
""")  # noqa: E501


BASE_PROFILE_MIRROR = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 97B done
#1 DONE 0.0s

#2 [internal] load metadata for mirror.invalid/docker.io/library/ubuntu:22.04
#2 ERROR: failed to do request: Head "https://mirror.invalid/v2/docker.io/library/ubuntu/manifests/22.04": dial tcp: lookup mirror.invalid on 127.0.0.53:53: no such host
------
 > [internal] load metadata for mirror.invalid/docker.io/library/ubuntu:22.04:
------
Dockerfile:1
--------------------
   1 | >>> FROM mirror.invalid/docker.io/library/ubuntu:22.04
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: mirror.invalid/docker.io/library/ubuntu:22.04: failed to resolve source metadata for mirror.invalid/docker.io/library/ubuntu:22.04: failed to do request: Head "https://mirror.invalid/v2/docker.io/library/ubuntu/manifests/22.04": dial tcp: lookup mirror.invalid on 127.0.0.53:53: no such host
""")  # noqa: E501


BASE_LOCAL_MISSING = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 86B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:dlimages-missing-tag
#2 ERROR: failed to do request: Head "https://registry-1.docker.io/v2/dlimages/base/manifests/dlimages-missing-tag": dial tcp: lookup registry-1.docker.io on 127.0.0.53:53: no such host
------
 > [internal] load metadata for docker.io/dlimages/base:dlimages-missing-tag:
------
Dockerfile:1
--------------------
   1 | >>> FROM dlimages/base:dlimages-missing-tag
   2 |     RUN true
   3 |
--------------------
ERROR: failed to solve: dlimages/base:dlimages-missing-tag: failed to resolve source metadata for docker.io/dlimages/base:dlimages-missing-tag: failed to do request: Head "https://registry-1.docker.io/v2/dlimages/base/manifests/dlimages-missing-tag": dial tcp: lookup registry-1.docker.io on 127.0.0.53:53: no such host
""")  # noqa: E501


APT_REFUSED = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 357B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://127.0.0.1:9/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
#5 0.186 Ign:1 http://127.0.0.1:9/debian bookworm InRelease
#5 0.186 Ign:2 http://127.0.0.1:9/debian bookworm-updates InRelease
#5 1.187 Ign:1 http://127.0.0.1:9/debian bookworm InRelease
#5 1.187 Ign:2 http://127.0.0.1:9/debian bookworm-updates InRelease
#5 3.188 Ign:1 http://127.0.0.1:9/debian bookworm InRelease
#5 3.188 Ign:2 http://127.0.0.1:9/debian bookworm-updates InRelease
#5 7.189 Err:1 http://127.0.0.1:9/debian bookworm InRelease
#5 7.189   Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)
#5 7.189 Err:2 http://127.0.0.1:9/debian bookworm-updates InRelease
#5 7.189   Unable to connect to 127.0.0.1:9:
#5 7.192 Reading package lists...
#5 7.205 W: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease  Could not connect to 127.0.0.1:9 (127.0.0.1). - connect (111: Connection refused)
#5 7.205 W: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm-updates/InRelease  Unable to connect to 127.0.0.1:9:
#5 7.205 W: Some index files failed to download. They have been ignored, or old ones used instead.
#5 7.216 Reading package lists...
#5 7.222 Building dependency tree...
#5 7.223 Reading state information...
#5 7.223 Package zsh is not available, but is referred to by another package.
#5 7.223 This may mean that the package is missing, has been obsoleted, or
#5 7.223 is only available from another source
#5 7.223
#5 7.224 E: Unable to locate package curl
#5 7.224 E: Package 'zsh' has no installation candidate
#5 ERROR: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://127.0.0.1:9/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
------
 > [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://127.0.0.1:9/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh:
7.205 W: Some index files failed to download. They have been ignored, or old ones used instead.
7.216 Reading package lists...
7.222 Building dependency tree...
7.223 Reading state information...
7.223 Package zsh is not available, but is referred to by another package.
7.223 This may mean that the package is missing, has been obsoleted, or
7.223 is only available from another source
7.223
7.224 E: Unable to locate package curl
7.224 E: Package 'zsh' has no installation candidate
------
Dockerfile:2
--------------------
   1 |     FROM dlimages/base:debian12
   2 | >>> RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://127.0.0.1:9/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
   3 |
--------------------
ERROR: failed to solve: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://127.0.0.1:9/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
""")  # noqa: E501


APT_UNRESOLVED = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 361B 0.1s done
#1 DONE 0.1s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B 0.1s done
#3 DONE 0.1s

#4 [1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://deb.example.org/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
#5 0.165 Ign:1 http://deb.example.org/debian bookworm InRelease
#5 0.165 Ign:2 http://deb.example.org/debian bookworm-updates InRelease
#5 1.184 Ign:1 http://deb.example.org/debian bookworm InRelease
#5 1.184 Ign:2 http://deb.example.org/debian bookworm-updates InRelease
#5 3.154 Ign:1 http://deb.example.org/debian bookworm InRelease
#5 3.154 Ign:2 http://deb.example.org/debian bookworm-updates InRelease
#5 7.155 Err:1 http://deb.example.org/debian bookworm InRelease
#5 7.155   Temporary failure resolving 'deb.example.org'
#5 7.158 Err:2 http://deb.example.org/debian bookworm-updates InRelease
#5 7.158   Temporary failure resolving 'deb.example.org'
#5 7.159 Reading package lists...
#5 7.172 W: Failed to fetch http://deb.example.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.example.org'
#5 7.172 W: Failed to fetch http://deb.example.org/debian/dists/bookworm-updates/InRelease  Temporary failure resolving 'deb.example.org'
#5 7.172 W: Some index files failed to download. They have been ignored, or old ones used instead.
#5 7.182 Reading package lists...
#5 7.187 Building dependency tree...
#5 7.188 Reading state information...
#5 7.189 Package zsh is not available, but is referred to by another package.
#5 7.189 This may mean that the package is missing, has been obsoleted, or
#5 7.189 is only available from another source
#5 7.189
#5 7.189 E: Unable to locate package curl
#5 7.189 E: Package 'zsh' has no installation candidate
#5 ERROR: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://deb.example.org/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
------
 > [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://deb.example.org/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh:
7.172 W: Some index files failed to download. They have been ignored, or old ones used instead.
7.182 Reading package lists...
7.187 Building dependency tree...
7.188 Reading state information...
7.189 Package zsh is not available, but is referred to by another package.
7.189 This may mean that the package is missing, has been obsoleted, or
7.189 is only available from another source
7.189
7.189 E: Unable to locate package curl
7.189 E: Package 'zsh' has no installation candidate
------
Dockerfile:2
--------------------
   1 |     FROM dlimages/base:debian12
   2 | >>> RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://deb.example.org/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
   3 |
--------------------
ERROR: failed to solve: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://deb.example.org/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
""")  # noqa: E501


APT_NO_SUCH_HOST = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 357B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://apt.invalid/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
#5 0.193 Ign:1 http://apt.invalid/debian bookworm InRelease
#5 0.194 Ign:2 http://apt.invalid/debian bookworm-updates InRelease
#5 1.194 Ign:1 http://apt.invalid/debian bookworm InRelease
#5 1.194 Ign:2 http://apt.invalid/debian bookworm-updates InRelease
#5 3.195 Ign:1 http://apt.invalid/debian bookworm InRelease
#5 3.196 Ign:2 http://apt.invalid/debian bookworm-updates InRelease
#5 7.196 Err:1 http://apt.invalid/debian bookworm InRelease
#5 7.196   Could not resolve 'apt.invalid'
#5 7.196 Err:2 http://apt.invalid/debian bookworm-updates InRelease
#5 7.196   Could not resolve 'apt.invalid'
#5 7.198 Reading package lists...
#5 7.208 W: Failed to fetch http://apt.invalid/debian/dists/bookworm/InRelease  Could not resolve 'apt.invalid'
#5 7.208 W: Failed to fetch http://apt.invalid/debian/dists/bookworm-updates/InRelease  Could not resolve 'apt.invalid'
#5 7.208 W: Some index files failed to download. They have been ignored, or old ones used instead.
#5 7.215 Reading package lists...
#5 7.218 Building dependency tree...
#5 7.219 Reading state information...
#5 7.220 Package zsh is not available, but is referred to by another package.
#5 7.220 This may mean that the package is missing, has been obsoleted, or
#5 7.220 is only available from another source
#5 7.220
#5 7.220 E: Unable to locate package curl
#5 7.220 E: Package 'zsh' has no installation candidate
#5 ERROR: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://apt.invalid/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
------
 > [2/2] RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://apt.invalid/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh:
7.208 W: Some index files failed to download. They have been ignored, or old ones used instead.
7.215 Reading package lists...
7.218 Building dependency tree...
7.219 Reading state information...
7.220 Package zsh is not available, but is referred to by another package.
7.220 This may mean that the package is missing, has been obsoleted, or
7.220 is only available from another source
7.220
7.220 E: Unable to locate package curl
7.220 E: Package 'zsh' has no installation candidate
------
Dockerfile:2
--------------------
   1 |     FROM dlimages/base:debian12
   2 | >>> RUN printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "http://apt.invalid/debian" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh
   3 |
--------------------
ERROR: failed to solve: process "/bin/sh -c printf 'Types: deb\\nURIs: %s\\nSuites: bookworm bookworm-updates\\nComponents: main\\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\\n' \"http://apt.invalid/debian\" > /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends curl zsh" did not complete successfully: exit code: 100
""")  # noqa: E501


PIP_REFUSED = real(r"""
#0 building with "default" instance using docker driver

#1 [ 1/11] FROM docker.io/dlimages/base:debian12
#1 CACHED

#2 [internal] load build definition from Dockerfile
#2 transferring dockerfile: 10.74kB done
#2 DONE 0.0s

#3 [internal] load metadata for docker.io/dlimages/base:debian12
#3 DONE 0.0s

#4 [internal] load .dockerignore
#4 transferring context: 2B done
#4 DONE 0.0s

#5 [internal] settings cache mount permissions
#5 CACHED

#6 [internal] load build context
#6 transferring context: 4.24MB 0.2s done
#6 DONE 0.2s

#7 [stage-0 2/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     umask 0022  && if [ -n "" ]; then         security="-security"      && keyring=/usr/share/keyrings/debian-archive-keyring.gpg      && printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n\n'             "" "bookworm bookworm-updates" "${keyring}"             "${security%/}" "bookworm-security" "${keyring}"             > /etc/apt/sources.list.d/debian.sources;     fi  && if [ -n "http://127.0.0.1:9/simple/" ]; then         printf '[global]\nindex-url = %s\n' "http://127.0.0.1:9/simple/" > /etc/pip.conf;     fi  && /mnt/dl-normalize
#7 DONE 3.4s

#8 [stage-0 3/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=tmpfs,target=/var/lib/apt/lists     --mount=type=tmpfs,target=/var/cache/apt     umask 0022  && apt-get update  && apt-get install -y --no-install-recommends         ca-certificates         curl         git         less         procps         python3         python3-dev         python3-venv         tini         zsh         zsh-syntax-highlighting  && /mnt/dl-normalize
(Reading database ... 5%
(Reading database ... 10%
(Reading database ... 15%
(Reading database ... 20%
(Reading database ... 25%
(Reading database ... 30%
(Reading database ... 35%
(Reading database ... 40%
(Reading database ... 45%
(Reading database ... 50%
(Reading database ... 55%
(Reading database ... 60%
(Reading database ... 65%
(Reading database ... 70%
(Reading database ... 75%
(Reading database ... 80%
(Reading database ... 85%
(Reading database ... 90%
(Reading database ... 95%
(Reading database ... 100%
(Reading database ... 6095 files and directories currently installed.)
(Reading database ... 5%
(Reading database ... 10%
(Reading database ... 15%
(Reading database ... 20%
(Reading database ... 25%
(Reading database ... 30%
(Reading database ... 35%
(Reading database ... 40%
(Reading database ... 45%
(Reading database ... 50%
(Reading database ... 55%
(Reading database ... 60%
(Reading database ... 65%
(Reading database ... 70%
(Reading database ... 75%
(Reading database ... 80%
(Reading database ... 85%
(Reading database ... 90%
(Reading database ... 95%
(Reading database ... 100%
(Reading database ... 8427 files and directories currently installed.)
(Reading database ... 5%
(Reading database ... 10%
(Reading database ... 15%
(Reading database ... 20%
(Reading database ... 25%
(Reading database ... 30%
(Reading database ... 35%
(Reading database ... 40%
(Reading database ... 45%
(Reading database ... 50%
(Reading database ... 55%
(Reading database ... 60%
(Reading database ... 65%
(Reading database ... 70%
(Reading database ... 75%
(Reading database ... 80%
(Reading database ... 85%
(Reading database ... 90%
(Reading database ... 95%
(Reading database ... 100%
(Reading database ... 8935 files and directories currently installed.)
#8 DONE 29.5s

#9 [stage-0 4/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/pip.lock,target=/mnt/pip.lock     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize
#9 3.863 Looking in indexes: http://127.0.0.1:9/simple/
#9 3.869 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc91cdf90>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 4.370 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a729d0>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 5.376 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a68e90>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 7.377 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a73e50>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 11.38 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a84bd0>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
#9 11.38 ERROR: Could not find a version that satisfies the requirement pip==24.3.1 (from versions: none)
#9 11.38 ERROR: No matching distribution found for pip==24.3.1
#9 ERROR: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize" did not complete successfully: exit code: 1
------
 > [stage-0 4/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/pip.lock,target=/mnt/pip.lock     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize:
3.863 Looking in indexes: http://127.0.0.1:9/simple/
3.869 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc91cdf90>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
4.370 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a729d0>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
5.376 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a68e90>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
7.377 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a73e50>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
11.38 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f8dc7a84bd0>: Failed to establish a new connection: [Errno 111] Connection refused')': /simple/pip/
11.38 ERROR: Could not find a version that satisfies the requirement pip==24.3.1 (from versions: none)
11.38 ERROR: No matching distribution found for pip==24.3.1
------
Dockerfile:75
--------------------
  74 |     # later, it would leave whiteouts stamped with the build's time in that later layer).
  75 | >>> RUN --mount=type=tmpfs,target=/mnt \
  76 | >>>     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize \
  77 | >>>     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/pip.lock,target=/mnt/pip.lock \
  78 | >>>     --mount=type=secret,id=pip_ca,uid=1000 \
  79 | >>>     --mount=type=secret,id=netrc,uid=1000 \
  80 | >>>     umask 0022 \
  81 | >>>  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
  82 | >>>  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi \
  83 | >>>  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev \
  84 | >>>  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip \
  85 | >>>  && export HOME=/home/dev \
  86 | >>>  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv \
  87 | >>>  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock \
  88 | >>>  && /mnt/dl-normalize
  89 |     # PyTorch 2.1.2 brings CUDA 12.1 and cuDNN 8.9.2 in its wheels; the base has no CUDA libraries.
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize" did not complete successfully: exit code: 1
""")  # noqa: E501


PIP_TLS = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 232B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/3] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [internal] load build context
#5 transferring context: 1.18kB done
#5 DONE 0.0s

#6 [2/3] COPY unrelated.pem /tmp/unrelated.pem
#6 DONE 0.0s

#7 [3/3] RUN PIP_CERT=/tmp/unrelated.pem pip download --no-deps -d /tmp/w "requests==2.31.0"
#7 0.586 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
#7 1.132 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
#7 2.176 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
#7 4.206 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
#7 8.253 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
#7 8.291 Could not fetch URL https://@PYPI@/simple/requests/: There was a problem confirming the ssl certificate: HTTPSConnectionPool(host='@PYPI@', port=443): Max retries exceeded with url: /simple/requests/ (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))) - skipping
#7 8.295 ERROR: Could not find a version that satisfies the requirement requests==2.31.0 (from versions: none)
#7 8.296 ERROR: No matching distribution found for requests==2.31.0
#7 ERROR: process "/bin/bash -o pipefail -c PIP_CERT=/tmp/unrelated.pem pip download --no-deps -d /tmp/w \"requests==2.31.0\"" did not complete successfully: exit code: 1
------
 > [3/3] RUN PIP_CERT=/tmp/unrelated.pem pip download --no-deps -d /tmp/w "requests==2.31.0":
0.586 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
1.132 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
2.176 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
4.206 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
8.253 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/requests/
8.291 Could not fetch URL https://@PYPI@/simple/requests/: There was a problem confirming the ssl certificate: HTTPSConnectionPool(host='@PYPI@', port=443): Max retries exceeded with url: /simple/requests/ (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))) - skipping
8.295 ERROR: Could not find a version that satisfies the requirement requests==2.31.0 (from versions: none)
8.296 ERROR: No matching distribution found for requests==2.31.0
------
Dockerfile:3
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 |     COPY unrelated.pem /tmp/unrelated.pem
   3 | >>> RUN PIP_CERT=/tmp/unrelated.pem pip download --no-deps -d /tmp/w "requests==2.31.0"
   4 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c PIP_CERT=/tmp/unrelated.pem pip download --no-deps -d /tmp/w \"requests==2.31.0\"" did not complete successfully: exit code: 1
""")  # noqa: E501


TORCH_INDEX = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 356B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/2] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_EXTRA_INDEX_URL="https://download.pytorch.org/whl/cu118" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118"
#5 0.504 Looking in indexes: https://@PYPI@/simple, https://download.pytorch.org/whl/cu118
#5 0.616 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12377210>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 1.118 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12377990>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 2.120 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c123943d0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 4.123 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12394dd0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 8.125 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12395790>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 8.129 ERROR: Could not find a version that satisfies the requirement torch==2.1.2+cu118 (from versions: 1.13.0, 1.13.1, 2.0.0, 2.0.1, 2.1.0, 2.1.1, 2.1.2, 2.2.0, 2.2.1, 2.2.2, 2.3.0, 2.3.1, 2.4.0, 2.4.1, 2.5.0, 2.5.1, 2.6.0, 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0)
#5 8.130 ERROR: No matching distribution found for torch==2.1.2+cu118
#5 ERROR: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && export PIP_EXTRA_INDEX_URL=\"${TORCH_INDEX_URL}\" && pip download --no-deps -d /tmp/w \"torch==2.1.2+cu118\"" did not complete successfully: exit code: 1
------
 > [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_EXTRA_INDEX_URL="https://download.pytorch.org/whl/cu118" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118":
0.504 Looking in indexes: https://@PYPI@/simple, https://download.pytorch.org/whl/cu118
0.616 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12377210>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
1.118 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12377990>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
2.120 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c123943d0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
4.123 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12394dd0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
8.125 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f9c12395790>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
8.129 ERROR: Could not find a version that satisfies the requirement torch==2.1.2+cu118 (from versions: 1.13.0, 1.13.1, 2.0.0, 2.0.1, 2.1.0, 2.1.1, 2.1.2, 2.2.0, 2.2.1, 2.2.2, 2.3.0, 2.3.1, 2.4.0, 2.4.1, 2.5.0, 2.5.1, 2.6.0, 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0)
8.130 ERROR: No matching distribution found for torch==2.1.2+cu118
------
Dockerfile:3
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 |     ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118
   3 | >>> RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118"
   4 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && export PIP_EXTRA_INDEX_URL=\"${TORCH_INDEX_URL}\" && pip download --no-deps -d /tmp/w \"torch==2.1.2+cu118\"" did not complete successfully: exit code: 1
""")  # noqa: E501


TORCH_FIND_LINKS = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 365B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/2] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_FIND_LINKS="https://download.pytorch.org/whl/torch_stable.html" && pip download --no-deps -d /tmp/w "torch==1.7.1+cu110"
#5 0.588 Looking in links: https://download.pytorch.org/whl/torch_stable.html
#5 0.593 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597e8fd0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
#5 1.096 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597e9990>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
#5 2.102 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597ea890>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
#5 4.104 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597eb490>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
#5 8.108 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597ebf10>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
#5 8.225 ERROR: Could not find a version that satisfies the requirement torch==1.7.1+cu110 (from versions: 1.13.0, 1.13.1, 2.0.0, 2.0.1, 2.1.0, 2.1.1, 2.1.2, 2.2.0, 2.2.1, 2.2.2, 2.3.0, 2.3.1, 2.4.0, 2.4.1, 2.5.0, 2.5.1, 2.6.0, 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0)
#5 8.225 ERROR: No matching distribution found for torch==1.7.1+cu110
#5 ERROR: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && export PIP_FIND_LINKS=\"${TORCH_FIND_LINKS}\" && pip download --no-deps -d /tmp/w \"torch==1.7.1+cu110\"" did not complete successfully: exit code: 1
------
 > [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_FIND_LINKS="https://download.pytorch.org/whl/torch_stable.html" && pip download --no-deps -d /tmp/w "torch==1.7.1+cu110":
0.588 Looking in links: https://download.pytorch.org/whl/torch_stable.html
0.593 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597e8fd0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
1.096 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597e9990>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
2.102 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597ea890>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
4.104 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597eb490>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
8.108 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64597ebf10>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/torch_stable.html
8.225 ERROR: Could not find a version that satisfies the requirement torch==1.7.1+cu110 (from versions: 1.13.0, 1.13.1, 2.0.0, 2.0.1, 2.1.0, 2.1.1, 2.1.2, 2.2.0, 2.2.1, 2.2.2, 2.3.0, 2.3.1, 2.4.0, 2.4.1, 2.5.0, 2.5.1, 2.6.0, 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0)
8.225 ERROR: No matching distribution found for torch==1.7.1+cu110
------
Dockerfile:3
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 |     ARG TORCH_FIND_LINKS=https://download.pytorch.org/whl/torch_stable.html
   3 | >>> RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && export PIP_FIND_LINKS="${TORCH_FIND_LINKS}" && pip download --no-deps -d /tmp/w "torch==1.7.1+cu110"
   4 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && export PIP_FIND_LINKS=\"${TORCH_FIND_LINKS}\" && pip download --no-deps -d /tmp/w \"torch==1.7.1+cu110\"" did not complete successfully: exit code: 1
""")  # noqa: E501


HASH_MISMATCH = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 399B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/2] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && printf 'six==1.16.0 --hash=sha256:%s\n' 0000000000000000000000000000000000000000000000000000000000000000 > /tmp/r.lock && pip download --no-deps --require-hashes --only-binary=:all: -d /tmp/w -r /tmp/r.lock
#5 0.750 Collecting six==1.16.0 (from -r /tmp/r.lock (line 1))
#5 0.838   Downloading six-1.16.0-py2.py3-none-any.whl (11 kB)
#5 0.838 ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
#5 0.838     six==1.16.0 from https://@PYPI_FILES@/packages/d9/5a/e7c31adbe875f2abbb91bd84cf2dc52d792b5a01506781dbcf25c91daf11/six-1.16.0-py2.py3-none-any.whl (from -r /tmp/r.lock (line 1)):
#5 0.838         Expected sha256 0000000000000000000000000000000000000000000000000000000000000000
#5 0.838              Got        8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254
#5 0.838
#5 ERROR: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && printf 'six==1.16.0 --hash=sha256:%s\\n' 0000000000000000000000000000000000000000000000000000000000000000 > /tmp/r.lock && pip download --no-deps --require-hashes --only-binary=:all: -d /tmp/w -r /tmp/r.lock" did not complete successfully: exit code: 1
------
 > [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && printf 'six==1.16.0 --hash=sha256:%s\n' 0000000000000000000000000000000000000000000000000000000000000000 > /tmp/r.lock && pip download --no-deps --require-hashes --only-binary=:all: -d /tmp/w -r /tmp/r.lock:
0.750 Collecting six==1.16.0 (from -r /tmp/r.lock (line 1))
0.838   Downloading six-1.16.0-py2.py3-none-any.whl (11 kB)
0.838 ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package versions, please update the hashes. Otherwise, examine the package contents carefully; someone may have tampered with them.
0.838     six==1.16.0 from https://@PYPI_FILES@/packages/d9/5a/e7c31adbe875f2abbb91bd84cf2dc52d792b5a01506781dbcf25c91daf11/six-1.16.0-py2.py3-none-any.whl (from -r /tmp/r.lock (line 1)):
0.838         Expected sha256 0000000000000000000000000000000000000000000000000000000000000000
0.838              Got        8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254
0.838
------
Dockerfile:2
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 | >>> RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && printf 'six==1.16.0 --hash=sha256:%s\n' 0000000000000000000000000000000000000000000000000000000000000000 > /tmp/r.lock && pip download --no-deps --require-hashes --only-binary=:all: -d /tmp/w -r /tmp/r.lock
   3 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && printf 'six==1.16.0 --hash=sha256:%s\\n' 0000000000000000000000000000000000000000000000000000000000000000 > /tmp/r.lock && pip download --no-deps --require-hashes --only-binary=:all: -d /tmp/w -r /tmp/r.lock" did not complete successfully: exit code: 1
""")  # noqa: E501


DISK_FULL = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 144B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [stage-0 2/2] RUN --mount=type=tmpfs,target=/t,size=1m dd if=/dev/zero of=/t/x bs=1M count=2
#5 0.153 dd: error writing '/t/x': No space left on device
#5 0.153 2+0 records in
#5 0.153 1+0 records out
#5 0.153 1048576 bytes (1.0 MB, 1.0 MiB) copied, 0.00194934 s, 538 MB/s
#5 ERROR: process "/bin/sh -c dd if=/dev/zero of=/t/x bs=1M count=2" did not complete successfully: exit code: 1
------
 > [stage-0 2/2] RUN --mount=type=tmpfs,target=/t,size=1m dd if=/dev/zero of=/t/x bs=1M count=2:
0.153 dd: error writing '/t/x': No space left on device
0.153 2+0 records in
0.153 1+0 records out
0.153 1048576 bytes (1.0 MB, 1.0 MiB) copied, 0.00194934 s, 538 MB/s
------
Dockerfile:2
--------------------
   1 |     FROM dlimages/base:debian12
   2 | >>> RUN --mount=type=tmpfs,target=/t,size=1m dd if=/dev/zero of=/t/x bs=1M count=2
   3 |
--------------------
ERROR: failed to solve: process "/bin/sh -c dd if=/dev/zero of=/t/x bs=1M count=2" did not complete successfully: exit code: 1
""")  # noqa: E501


PIN_MISSING = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 238B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/2] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && pip download --no-deps -d /tmp/w "six==9.9.9"
#5 0.525 ERROR: Could not find a version that satisfies the requirement six==9.9.9 (from versions: 0.9.0, 0.9.1, 0.9.2, 1.0b1, 1.0.0, 1.1.0, 1.2.0, 1.3.0, 1.4.0, 1.4.1, 1.5.0, 1.5.1, 1.5.2, 1.6.0, 1.6.1, 1.7.0, 1.7.1, 1.7.2, 1.7.3, 1.8.0, 1.9.0, 1.10.0, 1.11.0, 1.12.0, 1.13.0, 1.14.0, 1.15.0, 1.16.0, 1.17.0)
#5 0.525 ERROR: No matching distribution found for six==9.9.9
#5 ERROR: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && pip download --no-deps -d /tmp/w \"six==9.9.9\"" did not complete successfully: exit code: 1
------
 > [stage-0 2/2] RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && pip download --no-deps -d /tmp/w "six==9.9.9":
0.525 ERROR: Could not find a version that satisfies the requirement six==9.9.9 (from versions: 0.9.0, 0.9.1, 0.9.2, 1.0b1, 1.0.0, 1.1.0, 1.2.0, 1.3.0, 1.4.0, 1.4.1, 1.5.0, 1.5.1, 1.5.2, 1.6.0, 1.6.1, 1.7.0, 1.7.1, 1.7.2, 1.7.3, 1.8.0, 1.9.0, 1.10.0, 1.11.0, 1.12.0, 1.13.0, 1.14.0, 1.15.0, 1.16.0, 1.17.0)
0.525 ERROR: No matching distribution found for six==9.9.9
------
Dockerfile:2
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 | >>> RUN --mount=type=secret,id=pip_ca,uid=1000 export PIP_CERT=/run/secrets/pip_ca && pip download --no-deps -d /tmp/w "six==9.9.9"
   3 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c export PIP_CERT=/run/secrets/pip_ca && pip download --no-deps -d /tmp/w \"six==9.9.9\"" did not complete successfully: exit code: 1
""")  # noqa: E501


UNKNOWN = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 174B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [2/2] RUN echo "compiling the frobnicator" && echo "frobnicator: segmentation fault (core dumped)" >&2 && exit 3
#5 0.128 compiling the frobnicator
#5 0.128 frobnicator: segmentation fault (core dumped)
#5 ERROR: process "/bin/sh -c echo \"compiling the frobnicator\" && echo \"frobnicator: segmentation fault (core dumped)\" >&2 && exit 3" did not complete successfully: exit code: 3
------
 > [2/2] RUN echo "compiling the frobnicator" && echo "frobnicator: segmentation fault (core dumped)" >&2 && exit 3:
0.128 compiling the frobnicator
0.128 frobnicator: segmentation fault (core dumped)
------
Dockerfile:2
--------------------
   1 |     FROM dlimages/base:debian12
   2 | >>> RUN echo "compiling the frobnicator" && echo "frobnicator: segmentation fault (core dumped)" >&2 && exit 3
   3 |
--------------------
ERROR: failed to solve: process "/bin/sh -c echo \"compiling the frobnicator\" && echo \"frobnicator: segmentation fault (core dumped)\" >&2 && exit 3" did not complete successfully: exit code: 3
""")  # noqa: E501


PIP_CHECK = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile:
#1 transferring dockerfile: 10.96kB done
#1 DONE 3.3s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [stage-0 1/9] FROM docker.io/dlimages/base:debian12
#4 DONE 0.0s

#5 [internal] settings cache mount permissions
#5 DONE 0.0s

#6 [internal] load build context
#6 transferring context: 4.25MB 0.1s done
#6 DONE 0.1s

#5 [internal] settings cache mount permissions
#5 CACHED

#7 [stage-0 2/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     umask 0022  && if [ -n "" ]; then         security="-security"      && keyring=/usr/share/keyrings/debian-archive-keyring.gpg      && printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n\n'             "" "bookworm bookworm-updates" "${keyring}"             "${security%/}" "bookworm-security" "${keyring}"             > /etc/apt/sources.list.d/debian.sources;     fi  && if [ -n "" ]; then         printf '[global]\nindex-url = %s\n' "" > /etc/pip.conf;     fi  && /mnt/dl-normalize
#7 CACHED

#8 [stage-0 3/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=tmpfs,target=/var/lib/apt/lists     --mount=type=tmpfs,target=/var/cache/apt     umask 0022  && apt-get update  && apt-get install -y --no-install-recommends         ca-certificates         curl         git         less         procps         python3         python3-dev         python3-venv         tini         zsh         zsh-syntax-highlighting  && /mnt/dl-normalize
#8 CACHED

#9 [stage-0 4/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/pip.lock,target=/mnt/pip.lock     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && useradd --create-home --uid 1000 --user-group --shell /usr/bin/zsh dev  && install -d -o dev -g dev /workspace /opt/venv /home/dev/.cache /home/dev/.cache/pip  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups python3 -m venv /opt/venv  && setpriv --reuid=1000 --regid=1000 --clear-groups /opt/venv/bin/python -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: -r /mnt/pip.lock  && /mnt/dl-normalize
#9 CACHED

#10 [stage-0 5/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/framework.lock,target=/mnt/framework.lock     --mount=type=cache,target=/home/dev/.cache/pip,uid=1000,gid=1000     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && export HOME=/home/dev  && printf '%s\n'         "torch==2.1.2"         "torchaudio==2.1.2"         "torchvision==0.16.2"         "ipykernel==6.26.0"         "jupyterlab==4.0.9"         "matplotlib==3.7.3"         "numpy==1.24.4"         "opencv-python-headless==4.8.1.78"         "pandas==2.0.3"         "pillow==10.0.1"         "pyyaml==6.0.1"         "requests==2.31.0"         "scipy==1.10.1"         "tqdm==4.66.1"         > /opt/venv/constraints.txt  && chown dev:dev /opt/venv/constraints.txt  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/framework.lock  && /mnt/dl-normalize
#10 CACHED

#11 [stage-0 6/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/requirements.lock,target=/mnt/requirements.lock     --mount=type=cache,target=/home/dev/.cache/pip,uid=1000,gid=1000     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/requirements.lock  && install -m 0644 -o dev -g dev /mnt/requirements.lock /opt/venv/requirements.lock  && setpriv --reuid=1000 --regid=1000 --clear-groups pip check  && /mnt/dl-normalize
#11 0.690 Collecting anyio==4.16.0 (from -r /mnt/requirements.lock (line 6))
#11 0.745   Downloading anyio-4.16.0-py3-none-any.whl (134 kB)
#11 5.857 Installing collected packages: stack-data, pytz, pure-eval, ptyprocess, pexpect, websocket-client, webencodings, webcolors, wcwidth, uri-template, tzdata, traitlets, tqdm, tornado, tinycss2, terminado, soupsieve, six, send2trash, scipy, rpds-py, rfc3987-syntax, rfc3986-validator, rfc3339-validator, referencing, pyzmq, pyyaml, python-json-logger, python-dateutil, pyparsing, pygments, pycparser, psutil, prompt-toolkit, prometheus-client, platformdirs, parso, pandocfilters, pandas, packaging, overrides, opencv-python-headless, notebook-shim, nest-asyncio, nbformat, nbconvert, nbclient, mistune, matplotlib-inline, matplotlib, lark, kiwisolver, jupyterlab-server, jupyterlab-pygments, jupyterlab, jupyter-server-terminals, jupyter-server, jupyter-lsp, jupyter-events, jupyter-core, jupyter-client, jsonschema-specifications, jsonschema, jsonpointer, json5, jedi, isoduration, ipython-pygments-lexers, ipython, ipykernel, fqdn, fonttools, fastjsonschema, executing, defusedxml, debugpy, cycler, contourpy, comm, cffi, bleach, beautifulsoup4, babel, attrs, async-lru, asttokens, arrow, argon2-cffi-bindings, argon2-cffi, anyio
#11 33.77 Successfully installed anyio-4.16.0 argon2-cffi-25.1.0 argon2-cffi-bindings-26.2.0 arrow-1.4.0 asttokens-3.0.2 async-lru-2.4.0 attrs-26.1.0 babel-2.19.0 beautifulsoup4-4.15.0 bleach-6.4.0 cffi-2.1.1 comm-0.2.3 contourpy-1.3.2 cycler-0.12.1 debugpy-1.8.22 defusedxml-0.7.1 executing-2.3.0 fastjsonschema-2.22.3 fonttools-4.68.0 fqdn-1.6.0 ipykernel-6.26.0 ipython-9.18.1 ipython-pygments-lexers-1.1.1 isoduration-20.11.0 jedi-0.20.1 json5-0.17.3 jsonpointer-3.12 jsonschema-4.26.0 jsonschema-specifications-2025.9.1 jupyter-client-8.10.0 jupyter-core-5.9.1 jupyter-events-0.12.1 jupyter-lsp-2.3.1 jupyter-server-2.21.1 jupyter-server-terminals-0.5.4 jupyterlab-4.0.9 jupyterlab-pygments-0.3.0 jupyterlab-server-2.28.1 kiwisolver-1.5.1 lark-1.3.1 matplotlib-3.7.3 matplotlib-inline-0.2.2 mistune-3.4.0 nbclient-0.11.0 nbconvert-7.17.2 nbformat-5.11.1 nest-asyncio-1.6.0 notebook-shim-0.2.4 opencv-python-headless-4.8.1.78 overrides-7.7.0 packaging-26.4 pandas-2.0.3 pandocfilters-1.5.1 parso-0.8.7 pexpect-4.9.0 platformdirs-4.14.9 prometheus-client-0.26.0 prompt-toolkit-3.0.53 psutil-7.2.2 ptyprocess-0.7.0 pure-eval-0.2.4 pycparser-3.12 pygments-2.21.0 pyparsing-3.3.3 python-dateutil-4.0.0 python-json-logger-4.2.0 pytz-2019.3 pyyaml-6.0.1 pyzmq-27.3.0 referencing-0.37.0 rfc3339-validator-0.1.4 rfc3986-validator-0.1.1 rfc3987-syntax-1.1.0 rpds-py-2026.9.1 scipy-1.10.1 send2trash-2.2.0 six-1.17.0 soupsieve-2.10 stack-data-0.6.3 terminado-0.18.1 tinycss2-1.5.1 tornado-6.6.1 tqdm-4.66.1 traitlets-5.16.1 tzdata-2026.6 uri-template-1.3.0 wcwidth-0.9.4 webcolors-25.10.0 webencodings-0.6.1 websocket-client-1.9.2
#11 35.35 pandas 2.0.3 has requirement pytz>=2020.1, but you have pytz 2019.3.
#11 ERROR: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/requirements.lock  && install -m 0644 -o dev -g dev /mnt/requirements.lock /opt/venv/requirements.lock  && setpriv --reuid=1000 --regid=1000 --clear-groups pip check  && /mnt/dl-normalize" did not complete successfully: exit code: 1
------
 > [stage-0 6/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/requirements.lock,target=/mnt/requirements.lock     --mount=type=cache,target=/home/dev/.cache/pip,uid=1000,gid=1000     --mount=type=secret,id=pip_ca,uid=1000     --mount=type=secret,id=netrc,uid=1000     umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/requirements.lock  && install -m 0644 -o dev -g dev /mnt/requirements.lock /opt/venv/requirements.lock  && setpriv --reuid=1000 --regid=1000 --clear-groups pip check  && /mnt/dl-normalize:
5.566      ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 785.9/785.9 kB 342.9 MB/s eta 0:00:00
5.582 Collecting webcolors==25.10.0 (from -r /mnt/requirements.lock (line 1926))
5.590   Downloading webcolors-25.10.0-py3-none-any.whl (14 kB)
5.607 Collecting webencodings==0.6.1 (from -r /mnt/requirements.lock (line 1930))
5.614   Downloading webencodings-0.6.1-py3-none-any.whl (8.7 kB)
5.633 Collecting websocket-client==1.9.2 (from -r /mnt/requirements.lock (line 1936))
5.641   Downloading websocket_client-1.9.2-py3-none-any.whl (95 kB)
5.857 Installing collected packages: stack-data, pytz, pure-eval, ptyprocess, pexpect, websocket-client, webencodings, webcolors, wcwidth, uri-template, tzdata, traitlets, tqdm, tornado, tinycss2, terminado, soupsieve, six, send2trash, scipy, rpds-py, rfc3987-syntax, rfc3986-validator, rfc3339-validator, referencing, pyzmq, pyyaml, python-json-logger, python-dateutil, pyparsing, pygments, pycparser, psutil, prompt-toolkit, prometheus-client, platformdirs, parso, pandocfilters, pandas, packaging, overrides, opencv-python-headless, notebook-shim, nest-asyncio, nbformat, nbconvert, nbclient, mistune, matplotlib-inline, matplotlib, lark, kiwisolver, jupyterlab-server, jupyterlab-pygments, jupyterlab, jupyter-server-terminals, jupyter-server, jupyter-lsp, jupyter-events, jupyter-core, jupyter-client, jsonschema-specifications, jsonschema, jsonpointer, json5, jedi, isoduration, ipython-pygments-lexers, ipython, ipykernel, fqdn, fonttools, fastjsonschema, executing, defusedxml, debugpy, cycler, contourpy, comm, cffi, bleach, beautifulsoup4, babel, attrs, async-lru, asttokens, arrow, argon2-cffi-bindings, argon2-cffi, anyio
33.77 Successfully installed anyio-4.16.0 argon2-cffi-25.1.0 argon2-cffi-bindings-26.2.0 arrow-1.4.0 asttokens-3.0.2 async-lru-2.4.0 attrs-26.1.0 babel-2.19.0 beautifulsoup4-4.15.0 bleach-6.4.0 cffi-2.1.1 comm-0.2.3 contourpy-1.3.2 cycler-0.12.1 debugpy-1.8.22 defusedxml-0.7.1 executing-2.3.0 fastjsonschema-2.22.3 fonttools-4.68.0 fqdn-1.6.0 ipykernel-6.26.0 ipython-9.18.1 ipython-pygments-lexers-1.1.1 isoduration-20.11.0 jedi-0.20.1 json5-0.17.3 jsonpointer-3.12 jsonschema-4.26.0 jsonschema-specifications-2025.9.1 jupyter-client-8.10.0 jupyter-core-5.9.1 jupyter-events-0.12.1 jupyter-lsp-2.3.1 jupyter-server-2.21.1 jupyter-server-terminals-0.5.4 jupyterlab-4.0.9 jupyterlab-pygments-0.3.0 jupyterlab-server-2.28.1 kiwisolver-1.5.1 lark-1.3.1 matplotlib-3.7.3 matplotlib-inline-0.2.2 mistune-3.4.0 nbclient-0.11.0 nbconvert-7.17.2 nbformat-5.11.1 nest-asyncio-1.6.0 notebook-shim-0.2.4 opencv-python-headless-4.8.1.78 overrides-7.7.0 packaging-26.4 pandas-2.0.3 pandocfilters-1.5.1 parso-0.8.7 pexpect-4.9.0 platformdirs-4.14.9 prometheus-client-0.26.0 prompt-toolkit-3.0.53 psutil-7.2.2 ptyprocess-0.7.0 pure-eval-0.2.4 pycparser-3.12 pygments-2.21.0 pyparsing-3.3.3 python-dateutil-4.0.0 python-json-logger-4.2.0 pytz-2019.3 pyyaml-6.0.1 pyzmq-27.3.0 referencing-0.37.0 rfc3339-validator-0.1.4 rfc3986-validator-0.1.1 rfc3987-syntax-1.1.0 rpds-py-2026.9.1 scipy-1.10.1 send2trash-2.2.0 six-1.17.0 soupsieve-2.10 stack-data-0.6.3 terminado-0.18.1 tinycss2-1.5.1 tornado-6.6.1 tqdm-4.66.1 traitlets-5.16.1 tzdata-2026.6 uri-template-1.3.0 wcwidth-0.9.4 webcolors-25.10.0 webencodings-0.6.1 websocket-client-1.9.2
35.35 pandas 2.0.3 has requirement pytz>=2020.1, but you have pytz 2019.3.
------
Dockerfile:125
--------------------
 124 |     # conflicting. The constraints file holds the pins of matrix.yaml: pip install -c /opt/venv/constraints.txt ...
 125 | >>> RUN --mount=type=tmpfs,target=/mnt \
 126 | >>>     --mount=type=bind,source=assets/dl-normalize,target=/mnt/dl-normalize \
 127 | >>>     --mount=type=bind,source=pytorch/cuda12.1-torch2.1.2-py3.11-runtime/requirements.lock,target=/mnt/requirements.lock \
 128 | >>>     --mount=type=cache,target=/home/dev/.cache/pip,uid=1000,gid=1000 \
 129 | >>>     --mount=type=secret,id=pip_ca,uid=1000 \
 130 | >>>     --mount=type=secret,id=netrc,uid=1000 \
 131 | >>>     umask 0022 \
 132 | >>>  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
 133 | >>>  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi \
 134 | >>>  && export HOME=/home/dev \
 135 | >>>  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/requirements.lock \
 136 | >>>  && install -m 0644 -o dev -g dev /mnt/requirements.lock /opt/venv/requirements.lock \
 137 | >>>  && setpriv --reuid=1000 --regid=1000 --clear-groups pip check \
 138 | >>>  && /mnt/dl-normalize
 139 |     # JupyterLab answers on 8888; the token comes from JUPYTER_TOKEN, else Jupyter makes a random one and logs it.
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c umask 0022  && if [ -s /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi  && if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi  && export HOME=/home/dev  && setpriv --reuid=1000 --regid=1000 --clear-groups pip install --no-deps --require-hashes --only-binary=:all: -r /mnt/requirements.lock  && install -m 0644 -o dev -g dev /mnt/requirements.lock /opt/venv/requirements.lock  && setpriv --reuid=1000 --regid=1000 --clear-groups pip check  && /mnt/dl-normalize" did not complete successfully: exit code: 1
""")  # noqa: E501


TLS_THEN_TORCH_INDEX = real(r"""
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 278B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/2] FROM docker.io/lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
#4 CACHED

#5 [2/2] RUN export PIP_EXTRA_INDEX_URL="https://download.pytorch.org/whl/cu118" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118"
#5 0.716 Looking in indexes: https://@PYPI@/simple, https://download.pytorch.org/whl/cu118
#5 0.763 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
#5 1.309 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
#5 2.350 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
#5 4.394 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
#5 8.440 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
#5 8.488 Could not fetch URL https://@PYPI@/simple/torch/: There was a problem confirming the ssl certificate: HTTPSConnectionPool(host='@PYPI@', port=443): Max retries exceeded with url: /simple/torch/ (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))) - skipping
#5 8.490 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248a810>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 8.992 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248b2d0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 9.995 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248bf50>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 12.00 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f249cb90>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 16.00 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f249d650>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
#5 16.01 ERROR: Could not find a version that satisfies the requirement torch==2.1.2+cu118 (from versions: none)
#5 16.01 ERROR: No matching distribution found for torch==2.1.2+cu118
#5 ERROR: process "/bin/bash -o pipefail -c export PIP_EXTRA_INDEX_URL=\"${TORCH_INDEX_URL}\" && pip download --no-deps -d /tmp/w \"torch==2.1.2+cu118\"" did not complete successfully: exit code: 1
------
 > [2/2] RUN export PIP_EXTRA_INDEX_URL="https://download.pytorch.org/whl/cu118" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118":
4.394 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
8.440 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': /simple/torch/
8.488 Could not fetch URL https://@PYPI@/simple/torch/: There was a problem confirming the ssl certificate: HTTPSConnectionPool(host='@PYPI@', port=443): Max retries exceeded with url: /simple/torch/ (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))) - skipping
8.490 WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248a810>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
8.992 WARNING: Retrying (Retry(total=3, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248b2d0>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
9.995 WARNING: Retrying (Retry(total=2, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f248bf50>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
12.00 WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f249cb90>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
16.00 WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f73f249d650>: Failed to establish a new connection: [Errno -2] Name or service not known')': /whl/cu118/torch/
16.01 ERROR: Could not find a version that satisfies the requirement torch==2.1.2+cu118 (from versions: none)
16.01 ERROR: No matching distribution found for torch==2.1.2+cu118
------
Dockerfile:3
--------------------
   1 |     FROM lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime
   2 |     ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118
   3 | >>> RUN export PIP_EXTRA_INDEX_URL="${TORCH_INDEX_URL}" && pip download --no-deps -d /tmp/w "torch==2.1.2+cu118"
   4 |
--------------------
ERROR: failed to solve: process "/bin/bash -o pipefail -c export PIP_EXTRA_INDEX_URL=\"${TORCH_INDEX_URL}\" && pip download --no-deps -d /tmp/w \"torch==2.1.2+cu118\"" did not complete successfully: exit code: 1
""")  # noqa: E501


def lines(text: str) -> list[str]:
    return text.strip("\n").splitlines()


MIRROR_HELP = "https://mirror.example.org/help"


@pytest.fixture
def remedies(data: dict[str, Any], parse: Callable[[dict[str, Any]], Matrix]) -> Remedies:
    """The fixture matrix with these registry mirrors for the bases: `campus` adds one to its apt and PyPI mirrors,
    `hub` has nothing else."""
    for profile in data["mirrors"].values():
        profile.pop("bases", None)
    data["mirrors"]["campus"]["bases"] = {
        "registry": "campus.example.org/docker.io",
        "source": MIRROR_HELP,
        "limits": "",
    }
    data["mirrors"]["hub"] = {
        "description": "Base images only",
        "bases": {"registry": "mirror.invalid/docker.io", "source": MIRROR_HELP, "limits": "allow-listed images only"},
    }
    matrix = parse(data)
    return Remedies.from_matrix(matrix, expand(matrix).cells)


@pytest.fixture
def ci(cell: CellLookup) -> Cell:
    """The PyTorch cell on the offline Debian base (Python 3.11, PyPI's CUDA 12.1 wheels)."""
    return cell("pytorch", "cuda12.1-torch2.1.2-py3.11-runtime")


@pytest.fixture
def ubuntu(cell: CellLookup) -> Cell:
    """A PyTorch cell on ubuntu:22.04 whose CUDA build comes from PyTorch's own index (cu118)."""
    return cell("pytorch", "cuda11.8-torch2.1.2-py3.10-runtime")


def ways(diagnosis: Diagnosis) -> list[str]:
    """The advice's bullets, in order."""
    return [line.removeprefix("  - ") for line in diagnosis.advice.splitlines() if line.startswith("  - ")]


def test_remedies_read_what_each_profile_mirrors(remedies: Remedies) -> None:
    assert [name for name, _, _ in remedies.base_mirrors] == ["campus", "hub"]
    assert remedies.bases_only == ("hub",)
    assert remedies.pypi == remedies.apt == ("campus", "cloud")
    assert remedies.pytorch_wheels == ("cloud",)
    assert any(cell.bootstrap_base for cell in remedies.cells)


# --- the base image --------------------------------------------------------------------------------------------------


def test_a_registry_that_refuses_names_the_base_the_host_and_three_ways_out(remedies: Remedies) -> None:
    found = diagnose(lines(BASE_REFUSED), Attempt(), remedies)
    assert (found.kind, found.host, found.image) == ("base", "127.0.0.1:1", "127.0.0.1:1/library/ubuntu:22.04")
    assert found.summary == "base image not pullable (127.0.0.1:1)"
    assert found.advice.splitlines()[0] == (
        "The base image 127.0.0.1:1/library/ubuntu:22.04 cannot be pulled from 127.0.0.1:1: connection refused."
    )
    profile, own, offline = ways(found)
    assert "--mirror campus|hub (hub changes only the bases)" in profile
    assert f"`{MIRROR_BASES} --to HOST[/PREFIX]`" in own and "--base-registry HOST[/PREFIX]" in own
    # No cell known: the first framework of the matrix, its newest release on the offline base.
    assert "`invoke build --cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime`" in offline
    assert found.evidence is not None and found.evidence.endswith("dial tcp 127.0.0.1:1: connect: connection refused")


def test_docker_hub_unreachable_offers_the_same_framework_on_the_offline_base(
    cell: CellLookup, remedies: Remedies
) -> None:
    tf = cell("tensorflow", "cuda11.8-tf2.14.1-py3.10-runtime")
    found = diagnose(lines(BASE_DOCKER_HUB), Attempt(tf, base_image=tf.base_image), remedies)
    assert (found.kind, found.host, found.image) == ("base", "registry-1.docker.io", "ubuntu:22.04")
    assert "from registry-1.docker.io: the name does not resolve (no such host)" in found.advice
    profile, own, offline = ways(found)
    assert profile.endswith("--mirror campus|hub (hub changes only the bases)")
    assert own.startswith("a registry of your own")
    assert offline.endswith("`invoke build --cuda 11.8 --tf 2.14.1 --python 3.11 --flavor runtime`")


def test_a_base_registry_without_the_image_says_to_copy_the_bases_there(ci: Cell, remedies: Remedies) -> None:
    pulled = "127.0.0.1:5391/mirror/dlimages/base:debian12"
    found = diagnose(lines(BASE_NOT_FOUND), Attempt(ci, base_image=pulled), remedies)
    assert (found.host, found.image) == ("127.0.0.1:5391", pulled)
    assert found.advice.splitlines()[0] == (
        "The base image dlimages/base:debian12 cannot be pulled from the registry at 127.0.0.1:5391 (--base-registry "
        f"127.0.0.1:5391/mirror), as {pulled}: no such image there (not found)."
    )
    own, profile, offline = ways(found)
    assert f"`{MIRROR_BASES} --to 127.0.0.1:5391/mirror`" in own
    assert "this cell's base is made here" in profile
    assert offline.endswith(
        "run `invoke base`, then `invoke build --cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime` without "
        "--base-registry"
    )


def test_a_base_registry_that_wants_credentials_says_docker_login(ci: Cell, remedies: Remedies) -> None:
    pulled = "127.0.0.1:5392/mirror/dlimages/base:debian12"
    found = diagnose(lines(BASE_UNAUTHORIZED), Attempt(ci, base_image=pulled), remedies)
    assert found.host == "127.0.0.1:5392"
    assert "it asks for credentials (401 Unauthorized)" in found.advice
    assert "`docker login 127.0.0.1:5392`" in ways(found)[0]


def test_a_profiles_registry_mirror_that_fails_is_named_with_the_profile(ubuntu: Cell, remedies: Remedies) -> None:
    pulled = "mirror.invalid/docker.io/library/ubuntu:22.04"
    found = diagnose(lines(BASE_PROFILE_MIRROR), Attempt(ubuntu, "hub", base_image=pulled), remedies)
    assert found.host == "mirror.invalid"
    assert found.advice.startswith(
        "The base image ubuntu:22.04 cannot be pulled through mirror profile hub's registry mirror "
        f"mirror.invalid/docker.io, as {pulled}: mirror.invalid: the name does not resolve (no such host)."
    )
    profile, own, offline = ways(found)
    assert profile == "this build used hub's registry mirror mirror.invalid; another: --mirror campus"
    assert own.startswith("a registry of your own") and "invoke base" in offline


def test_a_missing_local_base_says_invoke_base_first(ci: Cell, remedies: Remedies) -> None:
    missing = dataclasses.replace(ci, base_image="dlimages/base:dlimages-missing-tag")
    found = diagnose(lines(BASE_LOCAL_MISSING), Attempt(missing, base_image=missing.base_image), remedies)
    assert found.kind == "base" and found.host == "registry-1.docker.io"
    assert "run `invoke base`" in ways(found)[0]


# --- package indexes and mirrors -------------------------------------------------------------------------------------


def test_an_unreachable_pip_index_names_its_host_and_the_pypi_profiles(ci: Cell, remedies: Remedies) -> None:
    found = diagnose(lines(PIP_REFUSED), Attempt(ci, pip_index="http://127.0.0.1:9/simple/"), remedies)
    assert (found.kind, found.host, found.summary) == ("pypi", "127.0.0.1:9", "PyPI unreachable (127.0.0.1:9)")
    assert found.advice.splitlines()[0] == (
        "pip could not reach the package index at 127.0.0.1:9 (http://127.0.0.1:9/simple/): connection refused."
    )
    assert ways(found) == ["mirror profiles that mirror PyPI: --mirror campus|cloud"]  # `host` is apt only
    # Not "a pinned version does not exist", which is what pip's last line says.
    assert "pinned" not in found.advice
    # The host comes from pip's own output ("Looking in indexes: ..."), not only from what the build was given.
    assert diagnose(lines(PIP_REFUSED)).host == "127.0.0.1:9"


def test_the_profile_in_use_is_not_offered_again(ci: Cell, remedies: Remedies) -> None:
    attempt = Attempt(ci, "campus", pip_index="http://127.0.0.1:9/simple/")
    assert ways(diagnose(lines(PIP_REFUSED), attempt, remedies)) == [
        "this build used campus's mirror of PyPI; another: --mirror cloud"
    ]


def test_an_untrusted_certificate_says_ca_bundle(ci: Cell, remedies: Remedies) -> None:
    found = diagnose(lines(PIP_TLS), Attempt(ci), remedies)
    assert (found.kind, found.host, found.summary) == ("pypi", PYPI_HOST, f"PyPI not trusted ({PYPI_HOST})")
    assert "its TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED)" in found.advice
    assert "--ca-bundle /path/ca.pem" in ways(found)[0]


def test_an_unreachable_apt_mirror_names_its_host_the_apt_profiles_and_the_host_mirror(
    ci: Cell, remedies: Remedies
) -> None:
    found = diagnose(lines(APT_REFUSED), Attempt(ci), remedies)
    assert (found.kind, found.host, found.summary) == ("apt", "127.0.0.1:9", "apt mirror unreachable (127.0.0.1:9)")
    assert "apt could not reach the mirror at 127.0.0.1:9: connection refused" in found.advice
    assert ways(found) == [
        "mirror profiles that mirror the apt archives: --mirror campus|cloud",
        "--mirror host: this machine's own Debian mirror (Debian-based cells only)",
    ]
    assert found.evidence is not None and "Could not connect to 127.0.0.1:9" in found.evidence


def test_an_apt_mirror_that_does_not_resolve(ci: Cell, remedies: Remedies) -> None:
    found = diagnose(lines(APT_UNRESOLVED), Attempt(ci), remedies)
    assert (found.kind, found.host) == ("apt", "deb.example.org")
    assert "the name does not resolve" in found.advice


def test_an_ubuntu_cell_is_not_offered_the_hosts_debian_mirror(ubuntu: Cell, remedies: Remedies) -> None:
    found = diagnose(lines(APT_NO_SUCH_HOST), Attempt(ubuntu), remedies)
    assert (found.kind, found.host) == ("apt", "apt.invalid")
    assert ways(found)[-1] == "(--mirror host, this machine's own Debian mirror, serves Debian cells only)"


def test_an_unreachable_pytorch_index_offers_the_wheel_mirror_and_a_cell_on_pypi_wheels(
    ubuntu: Cell, remedies: Remedies
) -> None:
    found = diagnose(lines(TORCH_INDEX), Attempt(ubuntu), remedies)
    assert (found.kind, found.host) == ("pytorch-index", "download.pytorch.org")
    assert found.summary == "PyTorch index unreachable (download.pytorch.org)"
    assert found.advice.splitlines()[0] == (
        "pip could not reach PyTorch's wheel index at download.pytorch.org (https://download.pytorch.org/whl/cu118) "
        "for the cu118 build of PyTorch 2.1.2: the name does not resolve."
    )
    assert ways(found) == [
        "mirror profiles that mirror PyTorch's CUDA wheels: --mirror cloud",
        "cells on PyPI's wheels need no PyTorch index (the CUDA 12.1 PyTorch cells): "
        "`invoke build --cuda 12.1 --torch 2.1.2 --python 3.10 --flavor runtime`",
    ]


def test_an_unreachable_find_links_page_is_pytorchs_too(cell: CellLookup, remedies: Remedies) -> None:
    old = cell("pytorch", "cuda11.0-torch1.7.1-py3.8-runtime")
    found = diagnose(lines(TORCH_FIND_LINKS), Attempt(old), remedies)
    assert (found.kind, found.host) == ("pytorch-index", "download.pytorch.org")
    assert "(https://download.pytorch.org/whl/torch_stable.html) for the cu110 build" in found.advice
    assert "`invoke build --cuda 12.1 --torch 2.1.2 --python 3.8 --flavor runtime`" in found.advice


def test_the_first_failure_leads_and_the_others_are_named(ubuntu: Cell, remedies: Remedies) -> None:
    found = diagnose(lines(TLS_THEN_TORCH_INDEX), Attempt(ubuntu), remedies)
    assert (found.kind, found.host) == ("pypi", PYPI_HOST)
    assert "--ca-bundle" in found.advice and "(also failed: download.pytorch.org)" in found.advice


def test_a_retry_in_a_step_that_succeeded_is_not_the_failure() -> None:
    retry = next(line for line in lines(PIP_REFUSED) if "Retrying" in line).replace("#9 ", "#4 ", 1)
    found = diagnose([retry, "#4 DONE 12.0s", *lines(UNKNOWN)])
    assert found.kind == "unknown" and found.summary == "build failed (exit code 3)"


# --- what the build says outright ------------------------------------------------------------------------------------


def test_a_hash_mismatch_names_the_host_that_served_the_file(ci: Cell) -> None:
    found = diagnose(lines(HASH_MISMATCH), Attempt(ci))
    assert (found.kind, found.host) == ("hash", PYPI_FILES)
    assert f"{PYPI_FILES} serves a different file, or the lock was edited" in found.advice


def test_a_full_disk() -> None:
    found = diagnose(lines(DISK_FULL))
    assert (found.kind, found.summary) == ("disk", "disk full")
    assert found.evidence == "dd: error writing '/t/x': No space left on device"


LOST_LAYER = """\
#5 [2/2] RUN true
#5 ERROR: failed to prepare sha256:2be6d7e8d6a80a56e896015280e127b66b124093811bf8a1e37fcc7089b1fbe5 as ybj7s0ioq7x428wkk8frcdwil: open /var/lib/docker/overlay2/cjwgvwtdawp2of18597ilampr/.tmp-committed1085405830: no such file or directory
------
ERROR: failed to solve: failed to prepare sha256:2be6d7e8d6a80a56e896015280e127b66b124093811bf8a1e37fcc7089b1fbe5 as ybj7s0ioq7x428wkk8frcdwil: open /var/lib/docker/overlay2/cjwgvwtdawp2of18597ilampr/.tmp-committed1085405830: no such file or directory
"""  # noqa: E501


def test_a_layer_the_engine_lost_says_to_restart_dockerd() -> None:
    """Seen in a CI run here after a cell's image was removed and rebuilt to the same layers (moby/buildkit#5469)."""
    found = diagnose(lines(LOST_LAYER))
    assert (found.kind, found.summary) == ("engine", "engine lost a layer")
    assert "until dockerd restarts" in found.advice and "moby/buildkit#5469" in found.advice
    assert found.evidence is not None and ".tmp-committed" in found.evidence


def test_a_version_missing_from_a_reachable_index_is_a_pin_problem(ci: Cell) -> None:
    found = diagnose(lines(PIN_MISSING), Attempt(ci))
    assert found.kind == "pin" and "does not exist on the index" in found.advice
    assert found.advice.endswith(f"pip looked in: {PyPI.simple_url}.")


def test_a_failed_pip_check_quotes_each_conflict_and_says_to_re_lock(ci: Cell) -> None:
    found = diagnose(lines(PIP_CHECK), Attempt(ci))
    conflict = "pandas 2.0.3 has requirement pytz>=2020.1, but you have pytz 2019.3."
    assert (found.kind, found.summary, found.evidence) == (
        "pip-check",
        "pip check: pandas needs pytz>=2020.1",
        conflict,
    )
    assert found.advice.splitlines()[:2] == [
        "Every package installed, but they do not fit together (`pip check`), so nothing was tagged:",
        f"    {conflict}",
    ]
    relock, relax = ways(found)
    assert relock.startswith("the cell's lock holds this set")
    assert relock.endswith("`invoke lock --cuda 12.1 --torch 2.1.2 --python 3.11 --flavor runtime`")
    assert "packages.overrides" in relax


def test_every_unmet_requirement_is_named_once(ci: Cell) -> None:
    # The real output with a second complaint, as pip words a requirement that is not installed at all.
    missing = "#11 35.35 jupyterlab 4.0.9 requires jupyter-lsp, which is not installed."
    output = lines(PIP_CHECK)
    at = next(i for i, line in enumerate(output) if "has requirement" in line) + 1
    found = diagnose([*output[:at], missing, *output[at:]], Attempt(ci))
    assert (found.kind, found.summary) == ("pip-check", "pip check: 2 unmet requirements")
    assert found.advice.splitlines()[1:3] == [
        "    pandas 2.0.3 has requirement pytz>=2020.1, but you have pytz 2019.3.",
        "    jupyterlab 4.0.9 requires jupyter-lsp, which is not installed.",
    ]


def test_no_engine_at_all() -> None:
    # What `docker buildx build` prints when no engine answers (and `docker info` before the engine was started).
    found = diagnose(
        ["ERROR: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"]
    )
    assert (found.kind, found.summary) == ("engine", "Docker engine not reachable")
    assert "`bash scripts/engine.sh`" in found.advice


def test_an_unknown_failure_quotes_the_failed_steps_last_lines() -> None:
    found = diagnose(lines(UNKNOWN))
    assert found.kind == "unknown" and found.summary == "build failed (exit code 3)"
    assert found.advice.splitlines() == [
        'The build failed in step [2/2] RUN echo "compiling the frobnicator" && echo "frobnicator: segmentation fault '
        "(co... (exit code 3); its last lines:",
        "    compiling the frobnicator",
        "    frobnicator: segmentation fault (core dumped)",
    ]


def test_without_the_matrix_the_advice_still_names_the_ways_out() -> None:
    found = diagnose(lines(BASE_DOCKER_HUB))
    profile, own, offline = ways(found)
    assert "--mirror NAME" in profile and MIRROR_BASES in own and "invoke matrix" in offline


def test_the_offline_cell_is_the_same_framework_and_flavor_newest_first(remedies: Remedies, cell: CellLookup) -> None:
    tf = cell("tensorflow", "cuda11.8-tf2.13.1-py3.8-devel")
    found = offline_cell(remedies.cells, tf)
    assert found is not None and found.slug == "cuda11.8-tf2.14.1-py3.11-runtime"  # no devel cell is offline
    assert offline_cell([]) is None
