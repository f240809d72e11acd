"""The composition root (``factory.create_app``) and the serving process (``serving.serve``)."""
