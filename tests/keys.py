"""Keys made once per test run (imported as tests.keys by conftest and tests alike, so they agree)."""


def generate_key_pair() -> tuple[str, str]:
    """A fresh ed25519 key: (OpenSSH private key text, public key line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


TEST_PRIVATE_KEY, _ = generate_key_pair()
_, TEST_HOST_KEY = generate_key_pair()
