"""A picture of an optiml report: headless Chromium (Debian's chromium and chromium-driver, through
Selenium) opens the page from its file, waits until it says it is drawn, shows a candidate's
details when asked, and saves a PNG of the whole page. No network.

    python3 bench/report/screenshot.py docs/report-stencil.html -o docs/report-stencil.png --node 6
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

SCRIPT = "screenshot.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html", type=Path, help="a page written by optiml report")
    ap.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    ap.add_argument("--node", type=int, help="the candidate whose details (diff, metrics) the picture shows")
    ap.add_argument("--width", type=int, default=1400, help="the window's width in pixels (default 1400)")
    args = ap.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        raise SystemExit(f"{SCRIPT}: headless Chromium is not installed (Debian: apt-get install -y chromium chromium-driver).")
    if not args.html.is_file():
        raise SystemExit(f"{SCRIPT}: {args.html} is not a file.")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        raise SystemExit(f"{SCRIPT}: selenium is not installed (pip install -e '.[test]').") from None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={args.width},1000", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        url = args.html.resolve().as_uri() + (f"#node={args.node}" if args.node is not None else "")
        driver.get(url)
        body = driver.find_element(By.TAG_NAME, "body")
        WebDriverWait(driver, 30).until(lambda d: body.get_attribute("data-ready") or body.get_attribute("data-error"))
        if body.get_attribute("data-error"):
            raise SystemExit(f"{SCRIPT}: the page failed to draw: {body.get_attribute('data-error')}")
        if args.node is not None:
            WebDriverWait(driver, 10).until(
                lambda d: d.find_element(By.ID, "details").get_attribute("data-node") == str(args.node))
        time.sleep(0.5)                  # the last transitions of the charts
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(args.width, min(int(height) + 40, 6000))
        time.sleep(0.3)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.output))
        print(f"wrote {args.output} ({args.width} x {min(int(height) + 40, 6000)} px; ready in "
              f"{body.get_attribute('data-ready-ms')} ms)")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
