"""Opening the stack's pages in the browser as a user, with the page's script errors collected."""

WATCHER_PASSWORD = "e2e-password-123"
# How long a page may take to show what the test waits for (a drawing, a socket opened, a pushed round). 15 s was
# not enough when the real vLLM engines compiled beside a browser test on two cores (a quiet full run): the topology
# tests took 373 s instead of 81 s in that company. A deadline only bounds a wait; a page that never draws still fails.
SHOWN_MS = 60_000
# Seconds a live round a test writes into the web server's cache is kept: longer than the slowest page load, or the
# page reads an expired round and draws no live layer (each live stack starts on a flushed database anyway).
LIVE_KEPT_S = 900


def logged_in_page(browser, live_stack: str, *, user: str = "watcher", password: str = WATCHER_PASSWORD,
                   height: int = 1000, console_errors: bool = False):
    """A new page logged in through the login form; `errors` collects uncaught script errors (and console errors
    when asked)."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    if console_errors:
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{live_stack}/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    return page, errors
