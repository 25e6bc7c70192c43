"""What a certificate is held to when it is not a design: a user's own model, and a Hugging Face one.

- ``model``: ``ModelSubject``, a user's model (or the factory that makes it) with its batch;
- ``pretrained``: a Hugging Face model directory, or a factory, as that subject, called
  the way it is trained (``tensorcad certify MODEL_DIR``).
"""
