"""Host-side facts: GPU drivers (NVIDIA, AMD), the Docker daemon's GPU support, and the compatibility
verdict between a host driver and an image's CUDA/ROCm requirement. Parsers are pure; collectors read
the machine through an injectable root folder and command runner, so tests use real output samples."""
