# syntax=docker/dockerfile:1
# sluice images on Debian bookworm (docs/deploy.md). Multi-stage: the build stages install
# the build dependencies with scripts/setup and compile only the `sluice` binary; the runtime
# stages hold the binary, the shared libraries it links and the demo model repository.
#
#   docker build --target cpu  -t sluice:cpu  .
#   docker build --target cuda -t sluice:cuda .       # CUDA 12 toolkit from NVIDIA's debian12 repo
#   docker run -p 8000:8000 -p 8001:8001 sluice:cpu   # the demo models of models/ (HTTP, gRPC)
#   docker run -p 8000:8000 -v /srv/models:/models sluice:cpu --model-repository /models
#
# The entrypoint is `sluice serve --host 0.0.0.0 --port 8000 --grpc-port 8001` (HTTP and KServe v2
# over gRPC); arguments add flags.

FROM debian:bookworm AS build-base
COPY scripts/setup /src/scripts/setup
RUN /src/scripts/setup && rm -rf /var/lib/apt/lists/*
WORKDIR /src

FROM build-base AS build-cpu
COPY . /src
RUN rm -rf build && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=OFF \
      -DSLUICE_BENCH=OFF && cmake --build build --target sluice

FROM build-base AS build-cuda
ARG CUDA_PKG=12-6
ARG CUDA_ARCHS=90
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates wget \
 && wget -q https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i cuda-keyring_1.1-1_all.deb && rm cuda-keyring_1.1-1_all.deb \
 && apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      cuda-nvcc-${CUDA_PKG} cuda-cudart-dev-${CUDA_PKG} libcublas-dev-${CUDA_PKG} \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:${PATH}
COPY . /src
RUN rm -rf build && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS} -DSLUICE_BENCH=OFF && cmake --build build --target sluice \
 && mkdir -p /cuda-libs && cp -a /usr/local/cuda/lib64/libcudart.so* /usr/local/cuda/lib64/libcublasLt.so* \
      /usr/local/cuda/lib64/libcublas.so* /cuda-libs/

# The shared libraries the binary links (the runtime halves of scripts/setup's -dev packages).
FROM debian:bookworm-slim AS runtime-base
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libdnnl2 libhwy1 libgomp1 libspdlog1.10 libfmt9 libsimdjson14 libutf8proc2 libpcre2-8-0 \
      libjpeg62-turbo libpng16-16 libwebp7 libwebpdemux2 libcurl4 ocl-icd-libopencl1 \
      libgrpc++1.51 libprotobuf32 \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 sluice
COPY models /models
EXPOSE 8000 8001
USER 10001
ENTRYPOINT ["sluice", "serve", "--host", "0.0.0.0", "--port", "8000", "--grpc-port", "8001"]
CMD ["--model-repository", "/models"]

FROM runtime-base AS cuda
USER root
COPY --from=build-cuda /cuda-libs/ /usr/local/lib/
RUN ldconfig
COPY --from=build-cuda /src/build/sluice /usr/local/bin/sluice
USER 10001

# Last: the default target is the CPU image.
FROM runtime-base AS cpu
COPY --from=build-cpu /src/build/sluice /usr/local/bin/sluice
