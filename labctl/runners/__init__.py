"""The example programs labctl runs across a lab, as small declarative specs."""
