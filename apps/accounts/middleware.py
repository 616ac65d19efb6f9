"""Login required for every page; the API answers 401/403 itself instead of redirecting."""

from django.contrib.auth.middleware import LoginRequiredMiddleware


class LoginRequiredEverywhereMiddleware(LoginRequiredMiddleware):
    open_prefixes = ("/api/", "/static/")
    html_pages = ("/api/docs/", "/api/redoc/")  # people read these: send them to the login page

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path.startswith(self.open_prefixes) and not request.path.startswith(self.html_pages):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
