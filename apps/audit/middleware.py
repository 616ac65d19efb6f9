from .actor import _actor


class AuditActorMiddleware:
    """Records the request's user for audit entries; DRF token users are set again by the API base view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _actor.set(getattr(request, "user", None))
        try:
            return self.get_response(request)
        finally:
            _actor.reset(token)
