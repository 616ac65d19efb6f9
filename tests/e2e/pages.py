"""Opening the stack's pages in the browser as a user, with the page's script errors collected."""

WATCHER_PASSWORD = "e2e-password-123"


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
