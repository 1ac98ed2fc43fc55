"""The report in a real browser: headless Chromium (Debian's chromium and chromium-driver, driven
through Selenium) opens the page from a file, with no network, and the rendered DOM must have the
summary, the chart's points and the tree's nodes; clicking a node of the tree or a point of the
chart shows that candidate's diff; a collapsed sibling group opens on a click. Skipped, saying why,
where Chromium or Selenium is missing (.ci/run installs both)."""
import shutil

import pytest
from click.testing import CliRunner

from optiml.cli import main
from tests.test_report_html import H100, PAD_B, synthetic

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
READY_S = 30

try:
    from selenium import webdriver
    from selenium.common.exceptions import ElementClickInterceptedException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:                      # pragma: no cover - the reason is given below
    webdriver = None

pytestmark = [
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="headless Chromium is not installed (Debian: "
                       "apt-get install -y chromium chromium-driver; .ci/run does it)"),
    pytest.mark.skipif(webdriver is None, reason="selenium is not installed (pip install -e '.[test]')"),
]


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(READY_S)
    yield driver
    driver.quit()


def open_report(driver, path) -> int:
    """Open the page and wait until it says it is drawn; returns the milliseconds it took."""
    driver.get(path.as_uri())
    body = driver.find_element(By.TAG_NAME, "body")
    WebDriverWait(driver, READY_S).until(lambda d: body.get_attribute("data-ready") or body.get_attribute("data-error"))
    assert not body.get_attribute("data-error"), body.get_attribute("data-error")
    return int(body.get_attribute("data-ready-ms"))


def shown(driver, node: int) -> str:
    """Wait until the candidate panel shows ``node``; its text."""
    WebDriverWait(driver, 5).until(lambda d: d.find_element(By.ID, "details").get_attribute("data-node") == str(node))
    return driver.find_element(By.ID, "details").text


def click_one(points) -> int:
    """Click the first of ``points`` that no other point covers (crosses of failures overlap at 0); its node."""
    for p in points[:40]:
        try:
            p.click()
        except ElementClickInterceptedException:
            continue
        return int(p.get_attribute("aria-label").split()[3].rstrip(":"))
    raise AssertionError("every point tried was covered by another")


def report(tmp_path, db, run, name):
    out = tmp_path / name
    r = CliRunner().invoke(main, ["report", str(run), "--db", str(db), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_recorded_report_draws_and_a_click_shows_the_diff(browser, tmp_path):
    open_report(browser, report(tmp_path, H100, 1, "h100.html"))
    assert "5.25x" in browser.find_element(By.ID, "summary").text
    points = browser.find_elements(By.CSS_SELECTOR, '#chart svg path[aria-label^="point of node "]')
    nodes = browser.find_elements(By.CSS_SELECTOR, '#tree svg path[aria-label^="node "]')
    assert len(points) == 31 and len(nodes) == 31
    assert browser.find_element(By.ID, "details").get_attribute("data-node") is None
    browser.find_element(By.CSS_SELECTOR, '#tree path[aria-label="node 2: ok"]').click()
    text = shown(browser, 2)
    diff = browser.find_element(By.CSS_SELECTOR, "#details pre.diff")
    assert PAD_B in diff.text and "-    __shared__ float Bs[TILE][TILE];" in diff.text
    assert "Bs rows are 32 words long" in text and "shared load bank conflicts" in text
    browser.find_element(By.CSS_SELECTOR, '#chart path[aria-label="point of node 5: ok"]').click()
    shown(browser, 5)
    assert "__launch_bounds__(TILE * TILE)" in browser.find_element(By.CSS_SELECTOR, "#details pre.diff").text
    assert browser.current_url.endswith("#node=5")


def test_the_1000_candidate_report_opens_with_large_groups_collapsed(browser, tmp_path, tmp_path_factory):
    ms = open_report(browser, report(tmp_path, synthetic(tmp_path_factory), 1, "big.html"))
    print(f"1000-candidate report drawn in {ms} ms")
    assert ms < 20000
    points = browser.find_elements(By.CSS_SELECTOR, '#chart svg path[aria-label^="point of node "]')
    nodes = browser.find_elements(By.CSS_SELECTOR, '#tree svg path[aria-label^="node "]')
    groups = browser.find_elements(By.CSS_SELECTOR, '#tree svg path[aria-label^="collapsed children of node "]')
    assert len(points) >= 999 and 0 < len(nodes) < 1000 and groups
    before = len(nodes)
    groups[0].click()
    WebDriverWait(browser, 10).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '#tree svg path[aria-label^="node "]')) > before)
    node = click_one(browser.find_elements(By.CSS_SELECTOR, '#chart path[aria-label$=": compile_error"]')[::-1])
    text = shown(browser, node)
    assert "VERIFICATION / FAILURE" in text.upper() and "is undefined" in text
    # the node was selected from the chart: the tree shows it, its group opened if it was collapsed
    assert browser.find_elements(By.CSS_SELECTOR, f'#tree path[aria-label="node {node}: compile_error"]')
