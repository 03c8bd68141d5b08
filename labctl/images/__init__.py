"""Node images: Debian root filesystems with a kernel, built once and cached."""
