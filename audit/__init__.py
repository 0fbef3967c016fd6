"""Rules knowledge base (``audit.kb``, pure Python) and report evaluation (Celery tasks)."""
