from .actor import _actor


class AuditActorMiddleware:
    """Makes the request the audit actor; its user is read when an entry is written (see current_actor)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _actor.set(request)
        try:
            return self.get_response(request)
        finally:
            _actor.reset(token)
