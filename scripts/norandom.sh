#!/bin/sh
# Run a command with address-space randomisation off (ThreadSanitizer's
# shadow memory needs it on kernels with large mmap randomness).
exec setarch "$(uname -m)" -R "$@"
