"""progress.py without Docker: the trackers read output captured from this project's engine (Docker 26.1.5,
BuildKit 0.13, the classic overlay2 image store, the reference registry on 127.0.0.1), and the display renders
for a terminal and for a log on a fake clock.

Fixtures are verbatim excerpts except where noted: BUILD_CACHED's lines are cut at 108 characters (its RUN lines
run to 1,200), and history rows of long instructions keep their first words only.
"""

from __future__ import annotations

import io
import re
import time

import pytest

from dlimages.building.progress import BuildProgress
from dlimages.core.display import WIDTH, ProgressDisplay, fit, format_bytes, format_duration
from dlimages.publish.pushprogress import (
    Layer,
    PushProgress,
    is_push_output,
    parse_diff_ids,
    parse_history,
    push_layers,
)

# --- real output -------------------------------------------------------------------------------------------------

# lab-pp/explore:many: FROM dlimages/base:debian12, ENV, 7 RUNs writing 20 MB each, WORKDIR, `RUN mkdir /emptydir`,
# LABEL, `RUN true`. `docker image inspect --format '{{json .RootFS.Layers}}'`, `{{.Size}}` was 214502183.
MANY_DIFF_IDS = (
    '["sha256:234a5191c615606db8771e59801b4071f0fc0f28eb8c419d3c38559e9c48713f",'
    '"sha256:64e7bee59f975ad514529e771100a9eea1223868d3e59b8d92c23bdac26056d7",'
    '"sha256:c4b77716e5e683a1af46afe8086842963d8877d7833c6954c33a5877808e24d7",'
    '"sha256:a7c45b0b3619b021897b9f538b3fc85bb3af0f61532060d62c6e648be0d7207a",'
    '"sha256:8b649fe05690ce0e07bac810a69ced40411028038c2a3b9a58e1ec1b5772a97a",'
    '"sha256:4b48cdbe7080ca4dc113ad625a8b3a3790e79ff953a19547317336f3d7a55f81",'
    '"sha256:706e6cca3bf7677a19e69aedad9a94ef964250999c75de1b145436b226cbcf9b",'
    '"sha256:3bda28fcecc4214ac3acb5a3845a0e66ccc8f3e991b896ae61ff82fd05f5a15c",'
    '"sha256:997a3593c7b00e8deab80969a709bc4616c26212e0f603612b58b858db8738cf",'
    '"sha256:a14546a1c0f2f2d87a3e7396ee5c2ca14cb6c461e0014cbb6fbb76100fc1e965",'
    '"sha256:8a5a53050104b6fbcded9c42d5e8c1f782b26700a53140473cb4025873a58d39"]\n'
)
MANY_SIZE = 214502183
# `docker history --human=false --no-trunc --format '{{.Size}} {{json .CreatedBy}}' lab-pp/explore:many`
MANY_HISTORY = """\
0 "RUN /bin/sh -c true # buildkit"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /g.bin # buildkit"
0 "LABEL x=y"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /f.bin # buildkit"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /e.bin # buildkit"
0 "RUN /bin/sh -c mkdir /emptydir # buildkit"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /d.bin # buildkit"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /c.bin # buildkit"
0 "WORKDIR /workspace"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /b.bin # buildkit"
20000000 "RUN /bin/sh -c head -c 20000000 /dev/urandom > /a.bin # buildkit"
0 "ENV A=1"
74502183 "mmdebstrap --mode=root --variant=minbase --format=tar bookworm main, bookworm-updates, bookworm-security"
"""

# The same for lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime (5874690746 bytes, 9 layers):
# two of its layers are empty (a RUN that only changed metadata, and WORKDIR: the empty tar's digest 5f70bf18...).
TORCH_DIFF_IDS = (
    '["sha256:234a5191c615606db8771e59801b4071f0fc0f28eb8c419d3c38559e9c48713f",'
    '"sha256:ba80bfd029ed96be1918dd9b2fdc0a90c9268de3c7f6c8449710b788eeab2df7",'
    '"sha256:04c4562967935b0f16d8b8ae9fa67b88f1c0019813b2d82b20bda09047f9826a",'
    '"sha256:c13b78676dea726588482409515998de925c81ad4cc756eef344e37a32503513",'
    '"sha256:0d55cbf0d6d8db719fd1d070086525caa48ee02dc27914d46ce99d234b2d1407",'
    '"sha256:3ab29f707fa0bf6f14c5fcb741af7827ebeb1ed889515c815d3763f16a50df3e",'
    '"sha256:806ebdbd38fc72998bcb53050193ce65b552dcde82cf6e63a1641f48f1cfd6c1",'
    '"sha256:2caace1c24b04a59dd8ec1f1e0c4a45463ab59e4d0aaddf0808cf4ee09c14ee9",'
    '"sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"]'
)
TORCH_SIZE = 5874690746
TORCH_HISTORY = """\
0 "CMD [\\"jupyter\\" \\"lab\\"]"
0 "ENTRYPOINT [\\"/usr/bin/tini\\" \\"--\\" \\"/usr/local/bin/dl-entrypoint\\"]"
0 "WORKDIR /workspace"
0 "USER 1000:1000"
0 "LABEL org.opencontainers.image.title=lab/pytorch-universal-dev"
0 "ARG REVISION=unknown"
634 "RUN |7 DEBIAN_FRONTEND=noninteractive"
70304 "RUN |7 DEBIAN_FRONTEND=noninteractive"
0 "EXPOSE map[8888/tcp:{}]"
576062234 "RUN |7 DEBIAN_FRONTEND=noninteractive"
4997292040 "RUN |7 DEBIAN_FRONTEND=noninteractive"
17626293 "RUN |7 DEBIAN_FRONTEND=noninteractive"
0 "ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin"
209137058 "RUN |7 DEBIAN_FRONTEND=noninteractive"
0 "RUN |7 DEBIAN_FRONTEND=noninteractive"
0 "ARG PIP_INDEX_URL="
0 "ARG APT_SECURITY_MIRROR="
0 "ARG APT_MIRROR="
0 "ARG MIRROR_PROFILE=none"
0 "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility"
0 "ENV LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1"
0 "ARG PYTHONHASHSEED=0"
0 "ARG SOURCE_DATE_EPOCH=0"
0 "ARG DEBIAN_FRONTEND=noninteractive"
0 "SHELL [/bin/bash -o pipefail -c]"
74502183 "mmdebstrap --mode=root --variant=minbase --format=tar bookworm"
"""

# The classic builder (DOCKER_BUILDKIT=0): FROM the base, ENV, COPY, WORKDIR (a layer there, of 0 bytes), RUN, LABEL.
CLASSIC_DIFF_IDS = (
    '["sha256:234a5191c615606db8771e59801b4071f0fc0f28eb8c419d3c38559e9c48713f",'
    '"sha256:76af8d8f4493589a03752cf941be6174b7b94d775e6a6847dd2afd439323e450",'
    '"sha256:28bf92443b4d0353fffedb69b4fa0b1e84e479c4423fed0b89e6928a901966dd",'
    '"sha256:7d68da8c65191335b3f16af84991484f16f4b65baf7cc696f8bdb440927eef80"]'
)
CLASSIC_HISTORY = """\
0 "/bin/sh -c #(nop)  LABEL x=y"
1000 "/bin/sh -c head -c 1000 /dev/urandom > /r.bin"
0 "/bin/sh -c #(nop) WORKDIR /work"
3 "/bin/sh -c #(nop) COPY file:63e4fd53e0703f1e446126de2246bde90b0a09aeab29d54844d39e4eb74bc3c3 in /f.txt "
0 "/bin/sh -c #(nop)  ENV A=1"
74502183 "mmdebstrap --mode=root --variant=minbase --format=tar bookworm main, bookworm-updates, bookworm-security"
"""

# `docker push 127.0.0.1:5241/lab-pp/explore:many` (stdout; stderr was empty): the first push (the base layer was
# in the registry already), the same again, then to another repository of the same registry.
PUSH_NEW = """\
The push refers to repository [127.0.0.1:5241/lab-pp/explore]
8a5a53050104: Preparing
a14546a1c0f2: Preparing
997a3593c7b0: Preparing
3bda28fcecc4: Preparing
706e6cca3bf7: Preparing
4b48cdbe7080: Preparing
8b649fe05690: Preparing
a7c45b0b3619: Preparing
c4b77716e5e6: Preparing
64e7bee59f97: Preparing
234a5191c615: Preparing
4b48cdbe7080: Waiting
8b649fe05690: Waiting
a7c45b0b3619: Waiting
c4b77716e5e6: Waiting
64e7bee59f97: Waiting
234a5191c615: Waiting
8a5a53050104: Pushed
706e6cca3bf7: Pushed
a14546a1c0f2: Pushed
3bda28fcecc4: Pushed
a7c45b0b3619: Pushed
997a3593c7b0: Pushed
4b48cdbe7080: Pushed
234a5191c615: Layer already exists
c4b77716e5e6: Pushed
8b649fe05690: Pushed
64e7bee59f97: Pushed
many: digest: sha256:f358989714e473910e97f28e3a3b6a0be3d5cbf5ef137aeef7c89b29a0a452ea size: 2632
"""

PUSH_AGAIN = """\
The push refers to repository [127.0.0.1:5241/lab-pp/explore]
8a5a53050104: Preparing
a14546a1c0f2: Preparing
997a3593c7b0: Preparing
3bda28fcecc4: Preparing
706e6cca3bf7: Preparing
4b48cdbe7080: Preparing
8b649fe05690: Preparing
a7c45b0b3619: Preparing
c4b77716e5e6: Preparing
64e7bee59f97: Preparing
234a5191c615: Preparing
4b48cdbe7080: Waiting
8b649fe05690: Waiting
a7c45b0b3619: Waiting
c4b77716e5e6: Waiting
64e7bee59f97: Waiting
234a5191c615: Waiting
706e6cca3bf7: Layer already exists
3bda28fcecc4: Layer already exists
a14546a1c0f2: Layer already exists
4b48cdbe7080: Layer already exists
997a3593c7b0: Layer already exists
c4b77716e5e6: Layer already exists
8b649fe05690: Layer already exists
8a5a53050104: Layer already exists
64e7bee59f97: Layer already exists
234a5191c615: Layer already exists
a7c45b0b3619: Layer already exists
many: digest: sha256:f358989714e473910e97f28e3a3b6a0be3d5cbf5ef137aeef7c89b29a0a452ea size: 2632
"""

PUSH_MOUNTED = """\
The push refers to repository [127.0.0.1:5241/lab-pp/other]
8a5a53050104: Preparing
a14546a1c0f2: Preparing
997a3593c7b0: Preparing
3bda28fcecc4: Preparing
706e6cca3bf7: Preparing
4b48cdbe7080: Preparing
8b649fe05690: Preparing
a7c45b0b3619: Preparing
4b48cdbe7080: Waiting
8b649fe05690: Waiting
c4b77716e5e6: Preparing
64e7bee59f97: Preparing
234a5191c615: Preparing
a7c45b0b3619: Waiting
c4b77716e5e6: Waiting
64e7bee59f97: Waiting
234a5191c615: Waiting
a14546a1c0f2: Mounted from lab-pp/explore
997a3593c7b0: Mounted from lab-pp/explore
8a5a53050104: Mounted from lab-pp/explore
706e6cca3bf7: Mounted from lab-pp/explore
3bda28fcecc4: Mounted from lab-pp/explore
c4b77716e5e6: Mounted from lab-pp/explore
4b48cdbe7080: Mounted from lab-pp/explore
a7c45b0b3619: Mounted from lab-pp/explore
8b649fe05690: Mounted from lab-pp/explore
64e7bee59f97: Mounted from lab-pp/explore
234a5191c615: Mounted from lab-pp/explore
many: digest: sha256:f358989714e473910e97f28e3a3b6a0be3d5cbf5ef137aeef7c89b29a0a452ea size: 2632
"""

BUILD_CACHED = """\
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 10.96kB done
#1 DONE 0.0s

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
#6 transferring context: 4.25MB 0.2s done
#6 DONE 0.2s

#7 [stage-0 8/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=
#7 CACHED

#8 [stage-0 4/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=
#8 CACHED

#9 [stage-0 5/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target=
#9 CACHED

#10 [stage-0 7/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target
#10 CACHED

#11 [stage-0 6/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target
#11 CACHED

#12 [stage-0 2/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target
#12 CACHED

#13 [stage-0 3/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,target
#13 CACHED

#14 [stage-0 9/9] WORKDIR /workspace
#14 CACHED

#15 exporting to image
#15 exporting layers done
#15 writing image sha256:0c2d71b554b1ab840af298415d118cc15cb4a206af684066a490139f183e4198 done
#15 DONE 0.0s
"""

BUILD_FAILING = """\
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile.run
#1 transferring dockerfile: 284B done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [1/6] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [2/6] RUN echo "step two 1796054299565819942" && sleep 1 && echo done two
#5 0.227 step two 1796054299565819942
#5 1.227 done two
#5 DONE 1.3s

#6 [3/6] RUN for i in 1 2 3; do echo "line $i"; sleep 0.5; done
#6 0.240 line 1
#6 0.742 line 2
#6 1.243 line 3
#6 DONE 1.8s

#7 [4/6] RUN head -c 1000000 /dev/urandom > /x.bin
#7 DONE 0.4s

#8 [5/6] RUN echo about to fail && exit 3
#8 0.357 about to fail
#8 ERROR: process "/bin/sh -c echo about to fail && exit 3" did not complete successfully: exit code: 3
------
 > [5/6] RUN echo about to fail && exit 3:
0.357 about to fail
------
Dockerfile.run:5
--------------------
   3 |     RUN for i in 1 2 3; do echo "line $i"; sleep 0.5; done
   4 |     RUN head -c 1000000 /dev/urandom > /x.bin
   5 | >>> RUN echo about to fail && exit 3
   6 |     RUN echo never
   7 |    \x20
--------------------
ERROR: failed to solve: process "/bin/sh -c echo about to fail && exit 3" did not complete successfully: exit code: 3
"""

BUILD_MULTI_STAGE = """\
#0 building with "default" instance using docker driver

#1 [internal] load build definition from Dockerfile.multi
#1 transferring dockerfile: 419B 0.0s done
#1 DONE 0.0s

#2 [internal] load metadata for docker.io/dlimages/base:debian12
#2 DONE 0.0s

#3 [internal] load .dockerignore
#3 transferring context: 2B done
#3 DONE 0.0s

#4 [other 1/2] FROM docker.io/dlimages/base:debian12
#4 CACHED

#5 [builder 2/3] RUN for i in 1 2 3 4; do echo "builder $i"; sleep 0.4; done > /dev/stderr
#5 0.331 builder 1
#5 0.733 builder 2
#5 1.135 builder 3
#5 1.556 builder 4
#5 ...

#6 [other 2/2] RUN for i in 1 2 3 4; do echo "other $i"; sleep 0.3; done
#6 0.327 other 1
#6 0.626 other 2
#6 0.922 other 3
#6 1.224 other 4
#6 DONE 1.6s

#5 [builder 2/3] RUN for i in 1 2 3 4; do echo "builder $i"; sleep 0.4; done > /dev/stderr
#5 DONE 2.0s

#7 [builder 3/3] RUN head -c 1000 /dev/urandom > /artifact
#7 DONE 0.4s

#8 [stage-2 2/4] COPY --from=builder /artifact /artifact
#8 DONE 0.1s

#9 [stage-2 3/4] COPY --from=other /etc/hostname /other
#9 DONE 0.1s

#10 [stage-2 4/4] RUN echo final
#10 0.353 final
#10 DONE 0.4s

#11 exporting to image
#11 exporting layers 0.1s done
#11 writing image sha256:92f20656d4167bbad42090bf1db5955400c116137f040e022228d8916aac2dfa
#11 writing image sha256:92f20656d4167bbad42090bf1db5955400c116137f040e022228d8916aac2dfa done
#11 naming to docker.io/lab-pp/explore:multi done
#11 DONE 0.1s
"""

# The registry stopped a second into a push of two 150 MB layers: docker retried every layer for a minute,
# printing a countdown each second (an excerpt: the first and last rounds), then gave up (its stderr is last).
PUSH_REGISTRY_GONE = """\
The push refers to repository [127.0.0.1:5245/lab-pp/explore]
8eae776587dc: Preparing
a9c11874baf0: Preparing
234a5191c615: Preparing
a9c11874baf0: Retrying in 5 seconds
234a5191c615: Retrying in 5 seconds
8eae776587dc: Retrying in 5 seconds
a9c11874baf0: Retrying in 4 seconds
8eae776587dc: Retrying in 4 seconds
234a5191c615: Retrying in 4 seconds
a9c11874baf0: Retrying in 1 second
8eae776587dc: Retrying in 1 second
234a5191c615: Retrying in 1 second
dial tcp 127.0.0.1:5245: connect: connection refused
"""
# A registry with basic auth and no `docker login`: stdout, then stderr.
PUSH_NO_CREDENTIALS = """\
The push refers to repository [127.0.0.1:5244/lab-pp/explore]
3d201647344b: Preparing
f3c7931f3d60: Preparing
a06ebbbeb333: Preparing
234a5191c615: Preparing
no basic auth credentials
"""
TORCH = "lab/pytorch-universal-dev:v1.0-cuda12.1-torch2.1.2-py3.11-runtime"


class Clock:
    """A clock the test moves: no sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def many_layers() -> tuple[Layer, ...]:
    diff_ids = parse_diff_ids(MANY_DIFF_IDS)
    assert diff_ids is not None
    return push_layers(diff_ids, parse_history(MANY_HISTORY))


def feed_all(tracker: PushProgress | BuildProgress, text: str, clock: Clock, step: float = 0.5) -> list[str]:
    """Every line in turn, the clock moving `step` s per line; the status lines that came back."""
    said = []
    for line in text.splitlines():
        clock.now += step
        status = tracker.feed(line)
        if status is not None:
            said.append(status)
    return said


# --- docker push: which layers, how big --------------------------------------------------------------------------


def test_docker_push_names_layers_by_the_first_12_hex_digits_of_their_diff_ids() -> None:
    named = set(re.findall(r"^([0-9a-f]{12}): ", PUSH_NEW, re.M))
    assert named == {layer.id for layer in many_layers()}
    assert len(named) == 11


def test_layer_sizes_come_from_history_rows_that_made_a_layer() -> None:
    layers = many_layers()
    mb20 = 20_000_000  # oldest first: the base, ENV (no layer), a, b, WORKDIR, c, d, mkdir, e, f, g, true
    assert [layer.size for layer in layers] == [74502183, mb20, mb20, 0, mb20, mb20, 0, mb20, mb20, mb20, 0]
    assert sum(layer.size or 0 for layer in layers) == MANY_SIZE


def test_the_pytorch_image_with_two_empty_layers_gets_every_size() -> None:
    diff_ids = parse_diff_ids(TORCH_DIFF_IDS)
    assert diff_ids is not None
    sizes = {layer.id: layer.size for layer in push_layers(diff_ids, parse_history(TORCH_HISTORY))}
    assert len(sizes) == 9 and sum(size or 0 for size in sizes.values()) == TORCH_SIZE
    assert sizes["0d55cbf0d6d8"] == 4997292040  # the framework's layer
    assert sizes["ba80bfd029ed"] == 0 and sizes["5f70bf18a086"] == 0  # the RUN without bytes, WORKDIR


def test_the_classic_builders_history_is_read_too() -> None:
    diff_ids = parse_diff_ids(CLASSIC_DIFF_IDS)
    assert diff_ids is not None
    layers = push_layers(diff_ids, parse_history(CLASSIC_HISTORY))
    assert [layer.size for layer in layers] == [74502183, 3, 0, 1000]


def test_sizes_stay_unknown_when_history_does_not_match_the_layers() -> None:
    diff_ids = parse_diff_ids(MANY_DIFF_IDS)
    assert diff_ids is not None
    shorter = parse_history("\n".join(MANY_HISTORY.splitlines()[2:]))  # two rows fewer: the mapping is unknowable
    layers = push_layers(diff_ids, shorter)
    assert len(layers) == 11 and {layer.size for layer in layers} == {None}
    assert push_layers(diff_ids, None) == layers
    tracker = PushProgress("lab-pp/explore:many", "127.0.0.1:5241", layers, clock=Clock())
    assert tracker.bytes_total is None and "MB" not in tracker.status()


@pytest.mark.parametrize("text", ["", "not json", '{"a": 1}', '["abc"]'])
def test_unreadable_diff_ids(text: str) -> None:
    assert parse_diff_ids(text) is None


@pytest.mark.parametrize("text", ["x", '12 "a"\nbig "b"', "3 not-json", "3 4"])
def test_unreadable_history(text: str) -> None:
    assert parse_history(text) is None


def test_a_layer_that_appears_twice_is_pushed_and_counted_once() -> None:
    diff = "sha256:" + "ab" * 32
    assert push_layers([diff, "sha256:" + "cd" * 32, diff], [(5, "RUN c"), (7, "RUN b"), (5, "RUN a")]) == (
        Layer("abababababab", 5),
        Layer("cdcdcdcdcdcd", 7),
    )


# --- docker push: progress ---------------------------------------------------------------------------------------


def test_push_counts_layers_and_bytes_as_they_finish() -> None:
    clock = Clock()
    tracker = PushProgress("lab-pp/explore:many", "127.0.0.1:5241", many_layers(), clock=clock)
    assert tracker.status() == "push lab-pp/explore:many -> 127.0.0.1:5241: 0/11 layers, 0.0/214.5 MB, 0s"
    said = feed_all(tracker, PUSH_NEW, clock)
    assert len(said) == 12  # one per layer, one for the digest
    assert said[0] == "push lab-pp/explore:many -> 127.0.0.1:5241: 1/11 layers, 0.0/214.5 MB, 9s"  # `RUN true`
    assert said[7] == ("push lab-pp/explore:many -> 127.0.0.1:5241: 8/11 layers (1 already there), 154.5/214.5 MB, 13s")
    assert said[-1].endswith(": 11/11 layers (1 already there), 214.5/214.5 MB, 15s, pushed")
    assert tracker.finished and tracker.bytes_done == tracker.bytes_total == MANY_SIZE


def test_layers_already_in_the_registry_or_mounted_count_as_done() -> None:
    for text in (PUSH_AGAIN, PUSH_MOUNTED):
        clock = Clock()
        tracker = PushProgress("lab-pp/explore:many", "127.0.0.1:5241", many_layers(), clock=clock)
        said = feed_all(tracker, text, clock, step=0.1)
        assert said[-1] == (
            "push lab-pp/...e:many -> 127.0.0.1:5241: 11/11 layers (11 already there), 214.5/214.5 MB, 3s, pushed"
        )
        assert all(len(line) <= WIDTH for line in said)


def test_without_known_layers_the_output_itself_is_counted() -> None:
    clock = Clock()
    tracker = PushProgress("lab-pp/explore:many", "127.0.0.1:5241", clock=clock)
    said = feed_all(tracker, PUSH_NEW, clock)
    assert said[0] == "push lab-pp/explore:many -> 127.0.0.1:5241: 1/11 layers, 9s"  # every layer said Preparing
    assert said[-1] == "push lab-pp/explore:many -> 127.0.0.1:5241: 11/11 layers (1 already there), 15s, pushed"


def test_layers_of_another_image_are_dropped_for_what_docker_names() -> None:
    clock = Clock()
    other = (Layer("000000000000", 10), Layer("111111111111", 20))
    tracker = PushProgress("lab-pp/explore:many", "127.0.0.1:5241", other, clock=clock)
    said = feed_all(tracker, PUSH_NEW, clock)
    assert said[-1].endswith(": 11/11 layers (1 already there), 15s, pushed")


def test_docker_retrying_is_said_once_not_every_second() -> None:
    clock = Clock()
    tracker = PushProgress("lab-pp/explore:big", "127.0.0.1:5245", clock=clock)
    said = feed_all(tracker, PUSH_REGISTRY_GONE, clock, step=0.33)
    assert said == ["push lab-pp/explore:big -> 127.0.0.1:5245: 0/3 layers, 1s, retrying 1 layer"]
    assert tracker.status() == "push lab-pp/explore:big -> 127.0.0.1:5245: 0/3 layers, 4s, retrying 3 layers"
    assert tracker.status(outcome="failed (exit 1)").endswith("0/3 layers, 4s, retrying 3 layers, failed (exit 1)")


def test_which_lines_are_progress_and_which_are_errors() -> None:
    lines = [*PUSH_NEW.splitlines(), *PUSH_MOUNTED.splitlines(), *PUSH_REGISTRY_GONE.splitlines()]
    lines += PUSH_NO_CREDENTIALS.splitlines()
    errors = [line for line in lines if not is_push_output(line)]
    assert errors == ["dial tcp 127.0.0.1:5245: connect: connection refused", "no basic auth credentials"]


def test_a_retried_push_says_which_try_it_is() -> None:
    tracker = PushProgress("lab/x:1", "127.0.0.1:5000", attempt=2, clock=Clock())
    assert tracker.status() == "push lab/x:1 -> 127.0.0.1:5000 (try 2): 0/0 layers, 0s"


def test_a_long_ref_is_cut_in_its_middle_and_keeps_the_registry() -> None:
    tracker = PushProgress(TORCH, "127.0.0.1:5055", many_layers(), clock=Clock())
    line = tracker.status()
    assert len(line) == WIDTH
    assert (
        line == "push lab/pytorch-universal-...h2.1.2-py3.11-runtime -> 127.0.0.1:5055: 0/11 layers, 0.0/214.5 MB, 0s"
    )


# --- docker buildx build --progress=plain ------------------------------------------------------------------------


def test_a_cached_build_counts_every_step_and_the_cached_ones() -> None:
    clock = Clock()
    tracker = BuildProgress(TORCH, clock=clock)
    assert tracker.status().endswith(": 0/? steps, 0s")
    said = feed_all(tracker, BUILD_CACHED, clock, step=0.1)
    assert said[0].endswith(": 1/9 steps, 1s")  # FROM
    assert said[1].endswith(": 8/9 steps (1 cached), 2s")  # step 8 is cached, so 2-7 are done
    assert said[-2].endswith(": 9/9 steps (8 cached), 4s")
    assert (
        said[-1]
        == "build lab/pytorch-universal-dev:v1.0...2.1-torch2.1.2-py3.11-runtime: 9/9 steps (8 cached), 5s, done"
    )
    assert (tracker.steps_done, tracker.steps_total, tracker.exported) == (9, 9, True)  # 8 cached: the lines above
    assert all(len(line) <= WIDTH for line in said)


def test_a_running_build_names_its_step_and_a_failed_one_where_it_failed() -> None:
    clock = Clock()
    tracker = BuildProgress("lab-pp/explore:run", clock=clock)
    said: list[str] = []
    for line in BUILD_FAILING.splitlines():
        clock.now += 1
        if line == "#6 0.742 line 2":
            assert tracker.current == '[3/6] RUN for i in 1 2 3; do echo "line $i"; sleep 0.5; done'
            assert tracker.status() == (
                'build lab-pp/explore:run: 2/6 steps (1 cached), 24s, now [3/6] RUN for i in 1 2 3; do echo "line ...'
            )
        if (status := tracker.feed(line)) is not None:
            said.append(status)
    assert said == [
        "build lab-pp/explore:run: 1/6 steps (1 cached), 15s",
        "build lab-pp/explore:run: 2/6 steps (1 cached), 20s",
        "build lab-pp/explore:run: 3/6 steps (1 cached), 26s",
        "build lab-pp/explore:run: 4/6 steps (1 cached), 29s",
        "build lab-pp/explore:run: 4/6 steps (1 cached), 33s, failed at [5/6] RUN echo about to fail && ex...",
    ]
    assert tracker.failed == "[5/6] RUN echo about to fail && exit 3"
    assert tracker.status(outcome="failed (exit 1)").endswith(": 4/6 steps (1 cached), 46s, failed (exit 1)")


def test_a_multi_stage_build_counts_each_stage_and_a_shared_from() -> None:
    clock = Clock()
    tracker = BuildProgress("lab-pp/explore:multi", clock=clock)
    said = feed_all(tracker, BUILD_MULTI_STAGE, clock, step=0.1)
    # BuildKit ran the three stages' FROM once, as `[other 1/2]`: the others' step 1 is done when step 2 starts.
    assert [line.split(": ", 1)[1] for line in said] == [
        "1/2 steps (1 cached), 1s",
        "3/5 steps (1 cached), 2s",
        "4/5 steps (1 cached), 3s",
        "5/5 steps (1 cached), 3s",
        "7/9 steps (1 cached), 3s",
        "8/9 steps (1 cached), 4s",
        "9/9 steps (1 cached), 4s",
        "9/9 steps (1 cached), 5s, done",
    ]


def test_run_options_and_automatic_stage_names_are_left_out_of_the_step() -> None:
    tracker = BuildProgress("x", clock=Clock())
    tracker.feed(
        "#12 [stage-0 2/9] RUN --mount=type=tmpfs,target=/mnt     --mount=type=bind,source=assets/dl-normalize,"
        'target=/mnt/dl-normalize     umask 0022  && if [ -n "" ]; then         security="-security"'
    )
    assert tracker.current == '[2/9] RUN umask 0022 && if [ -n "" ]; then security="-security"'
    tracker.feed("#5 [builder 2/3] RUN --network=none make")
    assert tracker.current == "[builder 2/3] RUN make"


def test_a_failure_outside_any_step_is_reported() -> None:
    tracker = BuildProgress("x", clock=Clock())
    assert tracker.feed("#1 [internal] load build definition from Dockerfile") is None
    assert tracker.feed("#1 DONE 0.0s") is None
    said = tracker.feed("ERROR: failed to solve: dockerfile parse error on line 3: unknown instruction: RUNN")
    assert said == "build x: 0/? steps, 0s, failed at the build"


# --- formatting --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59.9, "59s"), (60, "1m00s"), (80, "1m20s"), (3599, "59m59s"), (3720, "1h02m")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("done", "total", "text"),
    [
        (2_100_000_000, 5_874_690_746, "2.1/5.9 GB"),
        (0, MANY_SIZE, "0.0/214.5 MB"),
        (3, 1000, "0.0/1.0 kB"),
        (1, 9, "1/9 B"),
    ],
)
def test_format_bytes(done: int, total: int, text: str) -> None:
    assert format_bytes(done, total) == text


def test_fit_cuts_the_tail_then_the_name() -> None:
    assert fit("a", "b", 100, verb="push", after=" -> r") == "push a -> r: b"
    assert fit("name", "detail", 34, verb="build", tail="now something rather long") == (
        "build name: detail, now somethi..."
    )
    assert fit("name", "detail", 22, verb="build", tail="now x") == "build name: detail"
    assert (
        fit("abcdefghijklmnopqrstuvwxyz", "detail", 30, verb="push", after=" -> r") == "push abcde...wxyz -> r: detail"
    )
    assert all(len(fit("n" * n, "d" * 40, WIDTH, verb="push", after=" -> r" * 5)) <= WIDTH for n in range(200))


# --- showing it --------------------------------------------------------------------------------------------------


def test_a_log_gets_a_line_per_finished_layer_and_no_repeat_at_the_end() -> None:
    clock, out = Clock(), io.StringIO()
    display = ProgressDisplay(
        PushProgress("lab-pp/explore:many", "127.0.0.1:5241", many_layers(), clock=clock), out, clock=clock
    )
    assert not display.tty
    for line in PUSH_NEW.splitlines():
        clock.now += 0.5
        display.feed(line)
    display.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == 12 and all(len(line) <= WIDTH for line in lines)
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[-1].endswith(": 11/11 layers (1 already there), 214.5/214.5 MB, 15s, pushed")


def test_a_log_gets_a_heartbeat_every_30_s_while_nothing_finishes() -> None:
    clock, out = Clock(), io.StringIO()
    layers = (Layer("0d55cbf0d6d8", 4997292040), Layer("234a5191c615", 74502183))
    display = ProgressDisplay(PushProgress(TORCH, "127.0.0.1:5055", layers, clock=clock), out, clock=clock)
    display.feed("234a5191c615: Preparing")
    for _ in range(29):
        clock.now += 1
        display.tick()
    assert out.getvalue() == ""
    clock.now += 1
    display.tick()
    assert out.getvalue().splitlines() == [
        "push lab/pytorch-universal-d...ch2.1.2-py3.11-runtime -> 127.0.0.1:5055: 0/2 layers, 0.0/5.1 GB, 30s"
    ]
    clock.now += 20
    display.feed("234a5191c615: Layer already exists")  # a finished layer: at once, and the heartbeat starts over
    clock.now += 29
    display.tick()
    clock.now += 1
    display.tick()
    assert [line.split(": ", 1)[1] for line in out.getvalue().splitlines()[1:]] == [
        "1/2 layers (1 already there), 0.1/5.1 GB, 50s",
        "1/2 layers (1 already there), 0.1/5.1 GB, 1m20s",
    ]
    display.finish("failed (exit 1)")
    assert out.getvalue().splitlines()[-1].endswith(", 1m20s, failed (exit 1)")
    display.finish("again")  # once only
    assert "again" not in out.getvalue()


def test_a_terminal_gets_one_line_rewritten_in_place_a_few_times_a_second() -> None:
    clock, out = Clock(), io.StringIO()
    display = ProgressDisplay(
        PushProgress("lab-pp/explore:many", "127.0.0.1:5241", many_layers(), clock=clock), out, clock=clock, tty=True
    )
    display.feed("8a5a53050104: Preparing")
    assert out.getvalue() == "\rpush lab-pp/explore:many -> 127.0.0.1:5241: 0/11 layers, 0.0/214.5 MB, 0s\x1b[K"
    for _ in range(10):  # 10 lines in 0.1 s: no redraw
        clock.now += 0.01
        display.feed("8a5a53050104: Waiting")
    assert out.getvalue().count("\r") == 1
    clock.now += 0.2
    display.tick()
    assert out.getvalue().count("\r") == 2
    display.feed("8a5a53050104: Pushed")  # a finished layer: drawn at once
    assert out.getvalue().count("\r") == 3
    display.finish()
    text = out.getvalue()
    assert text.endswith("\rpush lab-pp/explore:many -> 127.0.0.1:5241: 1/11 layers, 0.0/214.5 MB, 0s\x1b[K\n")
    assert "\n" not in text[:-1]  # one line, rewritten
    assert all(len(part.removesuffix("\x1b[K")) <= WIDTH for part in text.strip().split("\r"))


def test_echoed_lines_go_above_the_status_line_in_full() -> None:
    clock, out = Clock(), io.StringIO()
    display = ProgressDisplay(BuildProgress("lab-pp/explore:run", clock=clock), out, clock=clock, tty=True)
    shown = BUILD_FAILING.splitlines()[:24]  # up to `#6 0.742 line 2`
    for line in shown:
        clock.now += 1
        display.feed(line, echo=True)
    screen = render_terminal(out.getvalue())
    assert screen[:-1] == shown  # the build's own output, all of it
    assert (
        screen[-1]
        == 'build lab-pp/explore:run: 2/6 steps (1 cached), 24s, now [3/6] RUN for i in 1 2 3; do echo "line ...'
    )

    log = io.StringIO()
    display = ProgressDisplay(BuildProgress("lab-pp/explore:run", clock=clock), log, clock=clock)
    for line in BUILD_FAILING.splitlines():
        display.feed(line, echo=True)
    display.finish("failed (exit 1)")
    lines = log.getvalue().splitlines()
    assert [line for line in lines if not line.startswith("build ")] == BUILD_FAILING.splitlines()
    assert [line for line in lines if line.startswith("build ")][-2:] == [
        "build lab-pp/explore:run: 4/6 steps (1 cached), 0s, failed at [5/6] RUN echo about to fail && exit 3",
        "build lab-pp/explore:run: 4/6 steps (1 cached), 0s, failed (exit 1)",
    ]


def render_terminal(text: str) -> list[str]:
    """What a terminal shows for text made of lines, `\\r` and erase-to-end-of-line."""
    screen = [""]
    for part in re.split(r"(\r|\n|\x1b\[K)", text):
        if part == "\n":
            screen.append("")
        elif part in ("\r", "\x1b[K"):
            screen[-1] = "" if part == "\r" else screen[-1]
        else:
            screen[-1] += part
    return screen


def test_ticking_keeps_a_terminal_line_moving_without_output() -> None:
    out = io.StringIO()
    display = ProgressDisplay(BuildProgress("x"), out, tty=True, refresh_s=0)
    with display.ticking(every_s=0.01):
        deadline = time.monotonic() + 5
        while out.getvalue().count("\r") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert out.getvalue().count("\r") >= 3
