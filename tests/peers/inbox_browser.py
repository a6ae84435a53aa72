"""The approver inbox in a real browser: headless Chromium (Debian's) driven by Selenium.

Usage: inbox_browser.py BASE SHOTS_DIR SCENARIO
The agent's side is plain HTTP to the JSON API (tokens `token-<id>`, as the e2e config has
them). Each scenario prints JSON lines with what it saw; the Rust test asserts on them.
"""

import json
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

BASE, SHOTS, SCENARIO = sys.argv[1], sys.argv[2], sys.argv[3]


def out(**kw):
    print(json.dumps(kw), flush=True)


def browser(width=1280, height=900, network_log=False):
    o = webdriver.ChromeOptions()
    if network_log:
        o.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    o.binary_location = "/usr/bin/chromium"
    for a in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-quic", f"--user-data-dir={tempfile.mkdtemp()}",
        f"--window-size={width},{height}",
    ]:
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=o)
    d.set_page_load_timeout(20)
    return d


def api(method, path, token, body=None, prefer=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    req.add_header("content-type", "application/json")
    if prefer:
        req.add_header("prefer", prefer)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Held(threading.Thread):
    """An agent's call held open (Prefer: wait) in the background."""

    def __init__(self, tool, args, context=None, agent="agent1"):
        super().__init__(daemon=True)
        self.body = {"tool": tool, "args": args}
        if context:
            self.body["context"] = context
        self.agent = agent
        self.result = None
        self.start()

    def run(self):
        self.result = api("POST", "/v1/calls", f"token-{self.agent}", self.body, prefer="wait=60")

    def wait(self):
        self.join(70)
        return self.result


def sign_in(d, who):
    d.get(BASE + "/inbox/")
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "token")))
    d.find_element(By.ID, "token").send_keys(f"token-{who}")
    d.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()


def idp_login(d, user):
    """The identity provider's own pages: its login form, then its consent."""
    WebDriverWait(d, 15).until(EC.presence_of_element_located((By.NAME, "login")))
    d.find_element(By.NAME, "login").send_keys(user)
    d.find_element(By.NAME, "password").send_keys("any")
    shot(d, "idp-login") if user == "alice" else None
    d.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(d, 15).until(lambda d: "/inbox/" in d.current_url or d.find_elements(By.CSS_SELECTOR, "input[value=consent]"))
    if "/inbox/" not in d.current_url:
        d.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        # The click does not wait for the way back: the consent page is still the one shown.
        WebDriverWait(d, 15).until(lambda d: "/inbox/" in d.current_url)


def wait_rows(d, n, timeout=15):
    WebDriverWait(d, timeout).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "a.row")) >= n)
    return d.find_elements(By.CSS_SELECTOR, "a.row")


def open_first_row(d, n=1):
    """Clicks the first pending row; the live list may redraw it in between, so try again."""
    from selenium.common.exceptions import StaleElementReferenceException
    for _ in range(10):
        try:
            wait_rows(d, n)[0].click()
            return
        except StaleElementReferenceException:
            time.sleep(0.1)
    raise SystemExit("the pending row kept changing under the click")


def shot(d, name):
    d.save_screenshot(f"{SHOTS}/{name}.png")


def no_xss(d):
    try:
        d.switch_to.alert
        return False
    except NoAlertPresentException:
        pass
    return d.execute_script(
        "return !window.__xss && document.querySelectorAll('script').length === 1"
        " && document.querySelectorAll('img, iframe, object, embed, svg').length === 0"
    )


def session_cookie(d):
    c = d.get_cookie("airlock_session")
    return c["value"] if c else None


def raw_post(path, cookie, form, headers):
    data = urllib.parse.urlencode(form).encode()
    req = urllib.request.Request(BASE + path, data=data, method="POST")
    req.add_header("cookie", f"airlock_session={cookie}")
    req.add_header("content-type", "application/x-www-form-urlencoded")
    for k, v in headers.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def pending_ids():
    s, b = api("GET", "/v1/approvals?status=pending", "token-admin")
    return [a["id"] for a in b["approvals"]]


import urllib.parse  # noqa: E402


def visited(d, part):
    """The URLs this browser requested that contain `part` (from its network log)."""
    urls = []
    for e in d.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m.get("method") == "Network.requestWillBeSent":
            url = m["params"]["request"]["url"]
            if part in url:
                urls.append(url)
    return urls


def main():
    d = browser(network_log=SCENARIO == "oidc")
    try:
        if SCENARIO == "approve":
            sign_in(d, "dba1")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "pending")))
            title_before = d.title
            held = Held("db.query", {"sql": "select * from users limit 5"}, {"run_id": "run-9"})
            rows = wait_rows(d, 1)  # appears without a reload
            time.sleep(0.3)
            out(live_row=True, title_before=title_before, title_after=d.title)
            shot(d, "inbox-list")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "pre.args")))
            out(fingerprint=d.find_element(By.CSS_SELECTOR, "code.fp").text,
                args=d.find_element(By.CSS_SELECTOR, "pre.args").text)
            shot(d, "inbox-approval")
            d.set_window_size(375, 812)
            shot(d, "inbox-approval-phone")
            d.set_window_size(1280, 900)
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            status, body = held.wait()
            out(agent_status=status, agent_body=body)
        elif SCENARIO == "layout":
            # Two held calls told apart by their args; decided, the page says so and offers the
            # next; at phone width each table keeps what matters; the audit page has times.
            a = Held("db.query", {"sql": "select 21"}, {"run_id": "run-L"})
            b = Held("db.query", {"sql": "select 22"}, {"run_id": "run-L"})
            sign_in(d, "dba1")
            wait_rows(d, 2)
            time.sleep(0.3)
            summaries = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.pending code.args")]
            shot(d, "inbox-pending-1280")
            labels = [e.rect["y"] for e in d.find_elements(By.CSS_SELECTOR, ".filters label")]
            inputs = [e.rect["y"] for e in d.find_elements(By.CSS_SELECTOR, ".filters input")]
            d.set_window_size(375, 812)
            time.sleep(0.2)
            shot(d, "inbox-pending-375")
            header_height = d.execute_script("return document.querySelector('header').getBoundingClientRect().height")
            page_width = d.execute_script("return document.documentElement.scrollWidth")
            keys_shown = d.find_element(By.CSS_SELECTOR, ".keys").is_displayed()
            d.set_window_size(1280, 900)
            open_first_row(d, 2)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "button.approve")))
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.decided")))
            heading = d.find_element(By.CSS_SELECTOR, "h1").text
            decided = d.find_element(By.CSS_SELECTOR, "p.decided")
            notice = decided.text
            next_links = [e.get_attribute("href") for e in decided.find_elements(By.CSS_SELECTOR, "a")]
            shot(d, "inbox-decided-1280")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            notice_on_screen = decided.rect["y"] < 812
            shot(d, "inbox-decided-375")
            a.wait()
            d.get(BASE + "/inbox/history")
            statuses = [e.text for e in d.find_elements(By.CSS_SELECTOR, "td span.badge") if e.is_displayed()]
            shot(d, "inbox-history-375")
            d.get(BASE + "/inbox/audit")
            audit_height = d.execute_script("return document.body.scrollHeight")
            shot(d, "inbox-audit-375")
            d.set_window_size(1280, 900)
            d.get(BASE + "/inbox/audit")
            ats = [e.text for e in d.find_elements(By.CSS_SELECTOR, "table.audit tbody td:nth-child(3)")]
            header_cells = [e.size["height"] for e in d.find_elements(By.CSS_SELECTOR, "table.audit th")]
            shot(d, "inbox-audit-1280")
            api("POST", f"/v1/approvals/{pending_ids()[0]}/decline", "token-dba1", {"reason": "done"})
            b.wait()

            class NoRedirect(urllib.request.HTTPRedirectHandler):
                def redirect_request(self, *args, **kw):
                    return None

            opener = urllib.request.build_opener(NoRedirect)
            try:
                opener.open(BASE + "/", timeout=10)
                root = (200, None)
            except urllib.error.HTTPError as e:
                root = (e.code, e.headers.get("location"))
            with urllib.request.urlopen(BASE + "/favicon.ico", timeout=10) as r:
                favicon = r.status
            out(summaries=summaries, labels=labels, inputs=inputs, header_height=header_height,
                page_width=page_width,
                keys_shown=keys_shown, heading=heading, notice=notice, next_links=next_links,
                notice_on_screen=notice_on_screen, statuses=statuses, audit_height=audit_height,
                ats=ats, header_cells=header_cells, root=root, favicon=favicon)
        elif SCENARIO == "link":
            # An approver follows the link a webhook or an MCP client gave, on a phone.
            d.set_window_size(375, 812)
            held = Held("db.query", {"sql": "select 7"})
            time.sleep(0.3)
            s, b = api("GET", "/v1/approvals?status=pending", "token-admin")
            link = b["approvals"][0]["links"]["inbox"] if "links" in b["approvals"][0] else None
            approval = b["approvals"][0]["id"]
            link = link or f"{BASE}/inbox/approvals/{approval}"
            start = time.time()
            d.get(link)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "token")))
            d.find_element(By.ID, "token").send_keys("token-dba1")
            d.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "button.approve")))
            landed = d.current_url
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            status, body = held.wait()
            seconds = time.time() - start
            d.set_window_size(1280, 900)
            d.get(BASE + "/inbox/history")
            history = d.find_element(By.CSS_SELECTOR, "main").text
            d.get(BASE + "/inbox/audit")
            audit = d.find_element(By.CSS_SELECTOR, "main").text
            out(landed=landed, approval=approval, seconds=seconds, agent_status=status,
                history_has_it="approved" in history, chain_ok="The chain verifies" in audit)
        elif SCENARIO == "run":
            # Two calls of one run and one of another; the run is declined as a whole.
            a = Held("db.query", {"sql": "select 11"}, {"run_id": "run-A"})
            b = Held("db.query", {"sql": "select 12"}, {"run_id": "run-A"})
            c = Held("db.query", {"sql": "select 13"}, {"run_id": "run-B"})
            sign_in(d, "dba1")
            wait_rows(d, 3)
            d.get(BASE + "/inbox/?run=run-A")
            rows = wait_rows(d, 2)
            filtered = len(d.find_elements(By.CSS_SELECTOR, "a.row"))
            open_first_row(d, 2)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "details.run")))
            d.find_element(By.CSS_SELECTOR, "details.run summary").click()
            d.find_element(By.ID, "run-reason").send_keys("this whole run is wrong")
            d.find_element(By.CSS_SELECTOR, "details.run button.decline").click()
            # The approval page has list items too: wait for the run's result page itself.
            WebDriverWait(d, 10).until(lambda d: d.title.startswith("Run decided"))
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "main ul li")))
            out(filtered=filtered, decided=[x.text for x in d.find_elements(By.CSS_SELECTOR, "main ul li")],
                a=a.wait()[0], b=b.wait()[0], pending=len(pending_ids()))
            c.join(0)
        elif SCENARIO == "decline":
            sign_in(d, "dba2")
            held = Held("db.query", {"sql": "delete from sessions"})
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "decline-reason")))
            # An empty reason is refused by the page and by the server.
            d.find_element(By.ID, "decline-reason").send_keys("not during business hours")
            d.find_element(By.CSS_SELECTOR, "form[action$='/decline'] button.decline").click()
            status, body = held.wait()
            out(agent_status=status, agent_body=body)
        elif SCENARIO == "empty-decline":
            sign_in(d, "dba2")
            Held("db.query", {"sql": "update t set x = 1"})
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "decline-reason")))
            d.execute_script("document.getElementById('decline-reason').removeAttribute('required')")
            d.find_element(By.CSS_SELECTOR, "form[action$='/decline'] button.decline").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.error")))
            out(error=d.find_element(By.CSS_SELECTOR, "p.error").text, pending=len(pending_ids()))
        elif SCENARIO == "edit":
            sign_in(d, "dba1")
            held = Held("db.query", {"sql": "select * from orders"})
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "details.edit")))
            d.find_element(By.CSS_SELECTOR, "details.edit summary").click()
            area = d.find_element(By.ID, "edit-args")
            area.clear()
            area.send_keys('{"sql": "select * from orders limit 10"}')
            d.find_element(By.ID, "preview-button").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#preview p.decision")))
            out(preview=d.find_element(By.CSS_SELECTOR, "#preview p.decision").text,
                added=[e.text for e in d.find_elements(By.CSS_SELECTOR, "#preview ins")],
                removed=[e.text for e in d.find_elements(By.CSS_SELECTOR, "#preview del")])
            shot(d, "inbox-edit-preview")
            d.find_element(By.CSS_SELECTOR, "#edit-form button.approve").click()
            status, body = held.wait()
            out(agent_status=status, agent_body=body)
        elif SCENARIO == "forbidden":
            sign_in(d, "fin1")
            held = Held("db.query", {"sql": "select 1"})
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "button.approve")))
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.error")))
            out(error=d.find_element(By.CSS_SELECTOR, "p.error").text, pending=len(pending_ids()))
            held.join(0)
        elif SCENARIO == "xss":
            payloads = [
                "<script>window.__xss=1</script>",
                "\"><img src=x onerror=\"window.__xss=1\">",
                "'><svg onload=window.__xss=1>",
                "javascript:window.__xss=1",
                "</pre><iframe src=javascript:window.__xss=1></iframe>",
                "{{7*7}}<a href=javascript:window.__xss=1>x</a>",
            ]
            for i, p in enumerate(payloads):
                s, b = api("POST", "/v1/calls", "token-agent1", {
                    "tool": "db.query",
                    "args": {"sql": p, p: p, "nested": [p, {"k": p}]},
                    "context": {"run_id": p, "thread_id": p, "tool_call_id": p, "labels": {"x": p}},
                }, prefer="respond-async")
                assert s == 202, (s, b)
                # agent_id is bound to the caller: a hostile one is refused before any page.
                s, b = api("POST", "/v1/calls", "token-agent1", {
                    "tool": "db.query", "args": {"sql": p}, "context": {"agent_id": p},
                }, prefer="respond-async")
                assert s == 403 and b["error"]["code"] == "request.agent_forbidden", (s, b)
            sign_in(d, "dba1")
            wait_rows(d, len(payloads))
            ok = [no_xss(d)]
            # Read in one script: the live list may redraw between element lookups.
            links = d.execute_script("return [...document.querySelectorAll('a.row')].map(a => a.href)")
            for href in links:
                d.get(href)
                WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "pre.args")))
                d.find_element(By.CSS_SELECTOR, "details.edit summary").click()
                d.find_element(By.ID, "preview-button").click()
                time.sleep(0.3)
                ok.append(no_xss(d))
                texts = d.find_element(By.CSS_SELECTOR, "main").text
                ok.append("window.__xss=1" in texts)  # shown as text
            shot(d, "inbox-xss")
            out(pages=len(links), all_safe=all(ok))
        elif SCENARIO == "csrf":
            sign_in(d, "dba1")
            Held("db.query", {"sql": "select 2"})
            wait_rows(d, 1)
            approval = pending_ids()[0]
            cookie = session_cookie(d)
            path = f"/inbox/approvals/{approval}/approve"
            csrf = d.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
            results = {
                "no_token": raw_post(path, cookie, {}, {"origin": BASE}),
                "wrong_token": raw_post(path, cookie, {"csrf": "0" * 64}, {"origin": BASE}),
                "other_origin": raw_post(path, cookie, {"csrf": csrf}, {"origin": "http://evil.example"}),
                "no_origin": raw_post(path, cookie, {"csrf": csrf}, {}),
                "cross_site": raw_post(path, cookie, {"csrf": csrf}, {"sec-fetch-site": "cross-site"}),
                "bearer_on_inbox": raw_post(path, "", {"csrf": csrf}, {"origin": BASE, "authorization": "Bearer token-dba1"}),
            }
            # The /v1 API takes bearer tokens only, never the session cookie.
            req = urllib.request.Request(BASE + f"/v1/approvals/{approval}", method="GET")
            req.add_header("cookie", f"airlock_session={cookie}")
            try:
                urllib.request.urlopen(req, timeout=10)
                results["cookie_on_api"] = 200
            except urllib.error.HTTPError as e:
                results["cookie_on_api"] = e.code
            out(results=results, still_pending=approval in pending_ids())
        elif SCENARIO == "signout":
            sign_in(d, "dba1")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "pending")))
            cookie = session_cookie(d)
            csrf = d.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
            d.find_element(By.CSS_SELECTOR, "form[action='/inbox/logout'] button").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "token")))
            Held("db.query", {"sql": "select 3"})
            time.sleep(0.5)
            approval = pending_ids()[0]
            stale = raw_post(f"/inbox/approvals/{approval}/approve", cookie, {"csrf": csrf}, {"origin": BASE})
            out(stale_post=stale, still_pending=approval in pending_ids())
        elif SCENARIO == "suspend":
            # A tool asks "which environment?" mid-call; an approver answers in the inbox.
            status, b = api("POST", "/v1/calls", "token-agent1",
                            {"tool": "ask.deploy", "args": {"service": "api"}, "context": {"run_id": "run-s"}})
            out(agent_status=status, agent_call=b)
            sign_in(d, "ops")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "pending")))
            d.get(BASE + "/inbox/suspended")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "main table")))
            out(list_text=d.find_element(By.CSS_SELECTOR, "main table").text, list_title=d.title)
            shot(d, "inbox-suspended-list")
            d.find_element(By.CSS_SELECTOR, "main table a").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "resume-form")))
            select = d.find_element(By.ID, "field-environment")
            options = [o.get_attribute("value") for o in select.find_elements(By.TAG_NAME, "option")]
            out(question=d.find_element(By.CSS_SELECTOR, "p.question").text, options=options)
            shot(d, "inbox-suspended-form")
            from selenium.webdriver.support.ui import Select
            # An answer the schema refuses: shown with the call, at the call's own address.
            d.execute_script(
                "const o = document.createElement('option'); o.value = o.textContent = 'nowhere';"
                " document.getElementById('field-environment').appendChild(o);")
            Select(select).select_by_value("nowhere")
            d.find_element(By.CSS_SELECTOR, "#resume-form button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.error")))
            out(refused=d.find_element(By.CSS_SELECTOR, "p.error").text, refused_url=d.current_url)
            d.refresh()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "resume-form")))
            out(after_reload_error=len(d.find_elements(By.CSS_SELECTOR, "p.error")))
            select = d.find_element(By.ID, "field-environment")
            Select(select).select_by_value("staging")
            form = d.find_element(By.ID, "resume-form")
            d.find_element(By.CSS_SELECTOR, "#resume-form button.approve").click()
            # The answer redirects to the same URL: wait for the old page to go, then the badge.
            WebDriverWait(d, 10).until(EC.staleness_of(form))
            from selenium.common.exceptions import StaleElementReferenceException
            WebDriverWait(d, 10, ignored_exceptions=[StaleElementReferenceException]).until(
                lambda d: "completed" in d.find_element(By.CSS_SELECTOR, "span.badge").text)
            out(after=d.find_element(By.CSS_SELECTOR, "main").text, no_xss=no_xss(d))
            shot(d, "inbox-suspended-done")
            s2, b2 = api("GET", f"/v1/calls/{b['call_id']}", "token-agent1")
            out(agent_after_status=s2, agent_after=b2)
        elif SCENARIO == "agent-signin":
            sign_in(d, "agent1")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.error")))
            out(error=d.find_element(By.CSS_SELECTOR, "p.error").text, cookie=session_cookie(d))
            shot(d, "inbox-login-refused")
        elif SCENARIO == "oidc":
            # "Sign in with corp" through the provider's own login and consent pages and back,
            # then approve a held call; an agent's account is refused in words.
            d.get(BASE + "/inbox/")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "oidc")))
            out(button=d.find_element(By.ID, "oidc").text)
            shot(d, "inbox-oidc-signin")
            d.set_window_size(375, 812)
            shot(d, "inbox-oidc-signin-375")
            d.set_window_size(1280, 900)
            d.find_element(By.ID, "oidc").click()
            idp_login(d, "alice")
            WebDriverWait(d, 15).until(EC.presence_of_element_located((By.ID, "pending")))
            out(after_sign_in=d.current_url, who=d.find_element(By.CSS_SELECTOR, ".who strong").text)
            held = Held("db.query", {"sql": "select 7"}, {"run_id": "run-O"})
            wait_rows(d, 1)
            time.sleep(0.3)
            shot(d, "inbox-oidc-signed-in")
            d.set_window_size(375, 812)
            shot(d, "inbox-oidc-signed-in-375")
            d.set_window_size(1280, 900)
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "button.approve")))
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            status, body = held.wait()
            out(agent_status=status)
            # The way back from the provider, replayed by another browser: nobody signed in.
            callback = visited(d, "/inbox/oidc/callback?")[0]
            thief = browser()
            try:
                thief.get(callback)
                out(replay_page=thief.find_element(By.TAG_NAME, "main").text, replay_cookie=session_cookie(thief))
                shot(thief, "inbox-oidc-replayed")
                # A forged state: this browser's own sign-in under way, answered with another's.
                thief.get(BASE + "/inbox/")
                WebDriverWait(thief, 10).until(EC.presence_of_element_located((By.ID, "oidc"))).click()
                WebDriverWait(thief, 15).until(EC.presence_of_element_located((By.NAME, "login")))
                thief.get(re.sub(r"state=[^&]*", "state=forged", callback))
                out(forged_page=thief.find_element(By.TAG_NAME, "main").text, forged_cookie=session_cookie(thief))
                thief.set_window_size(375, 812)
                shot(thief, "inbox-oidc-forged-375")
            finally:
                thief.quit()
            robot = browser()
            try:
                robot.get(BASE + "/inbox/")
                WebDriverWait(robot, 10).until(EC.presence_of_element_located((By.ID, "oidc"))).click()
                idp_login(robot, "robot")
                WebDriverWait(robot, 15).until(
                    lambda d: d.current_url.startswith(BASE) and d.find_elements(By.TAG_NAME, "main")
                )
                out(robot_page=robot.find_element(By.TAG_NAME, "main").text, robot_cookie=session_cookie(robot))
                shot(robot, "inbox-oidc-agent-refused")
            finally:
                robot.quit()
        elif SCENARIO == "review":
            # An MCP tool's changed definition, held for review (the gateway's test made the
            # upstream change it): its hostile description is text, never markup or a link;
            # the two definitions side by side at 1280, stacked at 375; approved from here.
            sign_in(d, "admin")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "table.sbs")))
            safe = no_xss(d)
            links = d.execute_script("return [...document.querySelectorAll('main a')].map(a => a.href)")
            main_text = d.find_element(By.TAG_NAME, "main").text
            changed = d.execute_script(
                "return [...document.querySelectorAll('table.sbs tr.changed')].map(r => r.innerText)")
            columns = d.execute_script(
                "const r = document.querySelector('table.sbs tr.changed');"
                "return [...r.querySelectorAll('td')].map(td => td.getBoundingClientRect().left)")
            shot(d, "inbox-review")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            d.execute_script("document.querySelector('table.sbs tr.changed').scrollIntoView()")
            phone_width = d.execute_script("return document.documentElement.scrollWidth")
            phone_columns = d.execute_script(
                "const r = document.querySelector('table.sbs tr.changed');"
                "return [...r.querySelectorAll('td')].filter(td => td.offsetParent).map(td => td.getBoundingClientRect().left)")
            shot(d, "inbox-review-phone")
            d.set_window_size(1280, 900)
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.decided")))
            out(safe=safe, links=links, main_text=main_text, changed=changed, columns=columns,
                phone_width=phone_width, phone_columns=phone_columns,
                decided=d.find_element(By.CSS_SELECTOR, "p.decided").text)
        elif SCENARIO == "shadow":
            # The shadow policy's page (the gateway's test made the calls): an approver is
            # refused it and has no link to it; an admin sees the transitions, widening first.
            sign_in(d, "dba1")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "nav")))
            approver_link = bool(d.find_elements(By.CSS_SELECTOR, "nav a[href='/inbox/shadow']"))
            d.get(BASE + "/inbox/shadow")
            approver_sees = d.find_element(By.TAG_NAME, "h1").text
            d.delete_all_cookies()
            sign_in(d, "admin")
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "nav a[href='/inbox/shadow']")))
            d.find_element(By.CSS_SELECTOR, "nav a[href='/inbox/shadow']").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "table.shadow")))
            rows = d.execute_script(
                "return [...document.querySelectorAll('table.shadow tbody tr')].map(r => [r.className, r.innerText])")
            headings = [h.text for h in d.find_elements(By.CSS_SELECTOR, "main h2")]
            call_links = d.execute_script("return [...document.querySelectorAll('main td a')].map(a => a.getAttribute('href'))")
            shot(d, "inbox-shadow")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            phone_width = d.execute_script("return document.documentElement.scrollWidth")
            shot(d, "inbox-shadow-phone")
            out(approver_link=approver_link, approver_sees=approver_sees, rows=rows,
                headings=headings, call_links=call_links, phone_width=phone_width)
        elif SCENARIO == "grants":
            # A held call whose rule lets the approver give more (the gateway's test made it):
            # the choice the policy allows, at 1280 and 375; approved for the run, three uses;
            # then the grants page lists it, and revoking it there stops it.
            sign_in(d, "dba1")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "fieldset.grant")))
            scopes = [e.get_attribute("value") for e in d.find_elements(By.CSS_SELECTOR, "input[name=grant_scope]")]
            checked = d.find_element(By.CSS_SELECTOR, "input[name=grant_scope]:checked").get_attribute("value")
            d.execute_script("document.querySelector('fieldset.grant').scrollIntoView()")
            shot(d, "inbox-grant-choice")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            d.execute_script("document.querySelector('fieldset.grant').scrollIntoView()")
            choice_width = d.execute_script("return document.documentElement.scrollWidth")
            shot(d, "inbox-grant-choice-phone")
            d.set_window_size(1280, 900)
            d.find_element(By.CSS_SELECTOR, "input[name=grant_scope][value=run]").click()
            d.find_element(By.ID, "grant-uses").send_keys("3")
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.decided")))
            decided = "approved" in d.find_element(By.CSS_SELECTOR, "p.decided").text
            d.find_element(By.CSS_SELECTOR, "nav a[href='/inbox/grants']").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "table.grants")))
            listed = d.find_element(By.CSS_SELECTOR, "table.grants").text
            shot(d, "inbox-grants")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            phone_width = max(choice_width, d.execute_script("return document.documentElement.scrollWidth"))
            shot(d, "inbox-grants-phone")
            d.set_window_size(1280, 900)
            d.find_element(By.CSS_SELECTOR, "table.grants button.decline").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.ok")))
            note = d.find_element(By.CSS_SELECTOR, "p.ok").text
            out(scopes=scopes, checked=checked, decided=decided, listed=listed, note=note,
                phone_width=phone_width)
        elif SCENARIO == "errors":
            # A call held because its approval rule ran out of its budget (the gateway's test
            # made it): "why it was held" names the rule and the reason, at 1280 and 375. Then
            # an admin declines every pending call of that agent from the page.
            sign_in(d, "dba1")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "ul.rules")))
            why = d.find_element(By.CSS_SELECTOR, "ul.rules").text
            shot(d, "inbox-rule-error")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            d.execute_script("document.querySelector('ul.rules').scrollIntoView()")
            phone_width = d.execute_script("return document.documentElement.scrollWidth")
            shot(d, "inbox-rule-error-phone")
            d.set_window_size(1280, 900)
            offered_to_approver = len(d.find_elements(By.CSS_SELECTOR, "details.flood"))
            d.find_element(By.CSS_SELECTOR, "form[action='/inbox/logout'] button").click()
            sign_in(d, "admin")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "details.flood")))
            d.find_element(By.CSS_SELECTOR, "details.flood summary").click()
            d.find_element(By.ID, "flood-reason").send_keys("this agent floods its approvers")
            d.find_element(By.CSS_SELECTOR, "form[action='/inbox/principals/decline'] button.decline").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p[role=status]")))
            declined = d.find_element(By.CSS_SELECTOR, "main").text
            shot(d, "inbox-declined-all")
            out(why=why, phone_width=phone_width, offered_to_approver=offered_to_approver,
                declined=declined)
        elif SCENARIO == "mail":
            # The link of an approval mail (the gateway's test read it from the mail the SMTP
            # server received): opened with no session it asks to sign in, and only then does
            # the page decide; approved there.
            import os
            link = os.environ["MAIL_LINK"]
            d.get(link)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "token")))
            asked_to_sign_in = "/inbox/login" in d.current_url
            d.find_element(By.ID, "token").send_keys("token-dba1")
            d.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "button.approve")))
            landed = d.current_url
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.decided")))
            out(asked_to_sign_in=asked_to_sign_in, landed=landed,
                decided=d.find_element(By.CSS_SELECTOR, "p.decided").text)
        elif SCENARIO == "request":
            # A held MCP resource read (the test held it): shown as what it is, at both widths,
            # with no way to edit its params; then approved.
            sign_in(d, "ops")
            rows = wait_rows(d, 1)
            row_text = rows[0].text
            shot(d, "inbox-request-list-1280")
            open_first_row(d)
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "pre.args")))
            facts = {dt.text: dd.text for dt, dd in zip(d.find_elements(By.CSS_SELECTOR, "dl dt"),
                                                        d.find_elements(By.CSS_SELECTOR, "dl dd"))}
            heading = d.find_element(By.CSS_SELECTOR, "h1").text
            section = [h.text for h in d.find_elements(By.CSS_SELECTOR, "h2")]
            can_edit = len(d.find_elements(By.CSS_SELECTOR, "details.edit")) > 0
            shot(d, "inbox-request-1280")
            d.set_window_size(375, 812)
            time.sleep(0.2)
            shot(d, "inbox-request-375")
            page_width = d.execute_script("return document.documentElement.scrollWidth")
            d.set_window_size(1280, 900)
            d.find_element(By.CSS_SELECTOR, "form[action$='/approve'] button.approve").click()
            WebDriverWait(d, 10).until(EC.presence_of_element_located((By.CSS_SELECTOR, "p.decided")))
            out(row=row_text, heading=heading, facts=facts, sections=section, can_edit=can_edit,
                page_width=page_width, decided_heading=d.find_element(By.CSS_SELECTOR, "h1").text,
                notice=d.find_element(By.CSS_SELECTOR, "p.decided").text)
        else:
            raise SystemExit(f"unknown scenario {SCENARIO}")
    finally:
        d.quit()


main()
