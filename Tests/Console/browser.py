#!/usr/bin/env python3
"""The console in a real browser (headless Chromium through Selenium), against a running
`kquery serve`: a deep-linked query shows its records; a bad predicate shows its caret; a record
saved in the console shows in the request log and the push log, and so does a test push; a change's subscription verdicts
name the failing clause; the zones page shows the learned schema, and a container exported and imported
under a new name has the same records. Saves a screenshot of each page. Exits non-zero on any failure.

Usage: browser.py BASE_URL SCREENSHOT_DIR   (BASE_URL like http://127.0.0.1:8080)
"""
import json
import os
import re
import struct
import sys
import urllib.parse
import urllib.request
import zlib

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE, SHOTS = sys.argv[1].rstrip("/"), sys.argv[2]
CONTAINER = "iCloud.com.example.console"
DATABASE = f"/database/1/{CONTAINER}/development/public"


def call(path, body=None, headers=None):
    request = urllib.request.Request(BASE + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def as_user(user, operation, body):
    tokens = call("/console/api/signin", {"user": user}, {"X-KQuery-Console": "1"})
    query = urllib.parse.urlencode({"ckAPIToken": tokens["apiToken"], "ckWebAuthToken": tokens["webAuthToken"]})
    return call(f"{DATABASE}/{operation}?{query}", body)


def png(width, height, rgb):
    """A PNG of one colour."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def seed_asset():
    """A Poster record whose image field is an uploaded PNG."""
    url = as_user("_alice", "assets/upload", {"tokens": [{"recordName": "poster", "recordType": "Poster", "fieldName": "image"}]})["tokens"][0]["url"]
    request = urllib.request.Request(url, data=png(96, 64, (47, 111, 222)), headers={"Content-Type": "image/png"})
    with urllib.request.urlopen(request) as response:
        uploaded = json.load(response)["singleFile"]
    as_user("_alice", "records/modify", {"operations": [{"operationType": "create", "record": {
        "recordName": "poster", "recordType": "Poster", "fields": {"image": {"value": uploaded, "type": "ASSETID"}}}}]})


def seed():
    subscriptions = [
        {"subscriptionID": "cheap-red", "subscriptionType": "query", "query": {"recordType": "Item"},
         "predicate": "price < 50 AND color == 'red'", "firesOn": ["create"], "notificationInfo": {"alertBody": "cheap and red"}},
        {"subscriptionID": "all-items", "subscriptionType": "query", "query": {"recordType": "Item"},
         "firesOn": ["create", "update"], "notificationInfo": {"alertBody": "an item"}},
    ]
    as_user("_bob", "subscriptions/modify", {"operations": [{"operationType": "create", "subscription": s} for s in subscriptions]})
    items = [("lamp", 10, "red"), ("chair", 20, "red"), ("table", 30, "blue"), ("desk", 45, "green")]
    as_user("_alice", "records/modify", {"operations": [
        {"operationType": "create", "record": {"recordName": name, "recordType": "Item",
                                                "fields": {"price": {"value": price}, "color": {"value": color}}}}
        for name, price, color in items]})
    seed_asset()


def main():
    os.makedirs(SHOTS, exist_ok=True)
    if os.path.exists(os.path.join(SHOTS, "failure.png")):
        os.remove(os.path.join(SHOTS, "failure.png"))
    seed()
    options = webdriver.ChromeOptions()
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 15)
    try:
        def rows(selector):
            """The text of each element `selector` finds, read in one script (tables re-render as logs stream)."""
            return driver.execute_script(
                "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", selector)

        def click_row(selector, text):
            driver.execute_script(
                "[...document.querySelectorAll(arguments[0])].find((e) => e.innerText.includes(arguments[1])).click()",
                selector, text)

        # 1. A deep-linked query renders its records, in its order.
        query = urllib.parse.urlencode({"container": CONTAINER, "environment": "development", "database": "public",
                                        "type": "Item", "q": "price > 15", "sort": "price:desc"})
        driver.get(f"{BASE}/console/records?{query}")
        wait.until(lambda d: len(rows("#records tbody tr td.code")) == 3)
        names = rows("#records tbody tr td.code")
        assert names == ["desk", "table", "chair"], names
        driver.save_screenshot(os.path.join(SHOTS, "records.png"))

        # 1b. Filters build the predicate: a quoted text value, a list of numbers, AND between them.
        driver.find_element(By.CSS_SELECTOR, "#filters summary").click()
        for field, operator, value in [("color", "=", 'red "x'), ("price", "is one of", "10, 20")]:
            driver.find_element(By.ID, "add-filter").click()
            row = driver.find_elements(By.CSS_SELECTOR, "#filter-rows .filter")[-1]
            row.find_element(By.NAME, "field").send_keys(field)
            Select(row.find_element(By.NAME, "operator")).select_by_visible_text(operator)
            row.find_element(By.NAME, "value").send_keys(value)
        driver.find_element(By.ID, "apply-filters").click()
        built = driver.find_element(By.NAME, "q").get_attribute("value")
        assert built == 'color == "red \\"x" AND price IN {10, 20}', built
        wait.until(lambda d: rows("#records tbody tr td.code") == ["No records."] or rows("#records tbody tr") == ["No records."])
        assert rows("#predicate-error") in ([""], []), rows("#predicate-error")
        row = driver.find_elements(By.CSS_SELECTOR, "#filter-rows .filter")[0]
        row.find_element(By.NAME, "value").clear()
        row.find_element(By.NAME, "value").send_keys("red")
        driver.find_element(By.ID, "apply-filters").click()
        wait.until(lambda d: sorted(rows("#records tbody tr td.code")) == ["chair", "lamp"])
        driver.save_screenshot(os.path.join(SHOTS, "records-filters.png"))
        driver.find_element(By.CSS_SELECTOR, "#filters summary").click()

        # 2. A bad predicate shows the message and the caret `kquery query` prints.
        box = driver.find_element(By.NAME, "q")
        driver.find_element(By.TAG_NAME, "body").send_keys("/")
        assert driver.switch_to.active_element == box, "/ goes to the predicate"
        box.clear()
        box.send_keys("price > ", Keys.ENTER)
        wait.until(lambda d: "^" in rows("#predicate-error")[0])
        error = rows("#predicate-error")[0]
        assert "error: 1:8: expected an expression after '>', found end of input" in error and "price >" in error, error
        assert rows("#records tbody tr") == [], "an invalid predicate leaves no stale results"
        driver.save_screenshot(os.path.join(SHOTS, "records-bad-predicate.png"))

        # 3. A record saved in the console, as _alice, through records/modify.
        box.clear()
        box.send_keys("color == 'blue'")
        user = driver.find_element(By.NAME, "user")
        user.send_keys("_alice", Keys.ENTER)
        wait.until(lambda d: rows("#records tbody tr td.code") == ["table"])
        driver.find_element(By.XPATH, "//button[text()='New record']").click()
        text = driver.find_element(By.ID, "record-json")
        text.clear()
        text.send_keys(json.dumps({"recordName": "stool", "recordType": "Item",
                                   "fields": {"price": {"value": 15}, "color": {"value": "blue"}}}))
        driver.find_element(By.ID, "save-record").click()
        wait.until(lambda d: "stool" in rows("#records tbody tr td.code"))
        assert "stool" in driver.current_url or "records" in driver.current_url
        driver.save_screenshot(os.path.join(SHOTS, "records-saved.png"))

        # 4. Its request, with _alice's web auth token, in the request log.
        driver.find_element(By.CSS_SELECTOR, "nav a[data-page=requests]").click()
        wait.until(lambda d: any("records/modify" in r and "_alice" in r for r in rows("#request-rows tr")))
        modify = [r for r in rows("#request-rows tr") if "records/modify" in r][0]
        assert "200" in modify and "web auth token of _alice" in modify, modify
        click_row("#request-rows tr", "records/modify")
        wait.until(lambda d: "stool" in rows("#response-body")[0])
        operation = driver.find_element(By.ID, "filter-operation")
        operation.send_keys("subscriptions/modify")
        wait.until(lambda d: len(rows("#request-rows tr")) == 1 and "subscriptions/modify" in rows("#request-rows tr")[0])
        operation.send_keys(Keys.CONTROL, "a")
        operation.send_keys(Keys.BACKSPACE)
        wait.until(lambda d: len(rows("#request-rows tr")) >= 3)
        driver.save_screenshot(os.path.join(SHOTS, "requests.png"))

        # 5. Its push in the push log, and the verdicts of its change: cheap-red's failing clause.
        driver.find_element(By.CSS_SELECTOR, "#request-facts a.explain-link").click()
        wait.until(lambda d: any("all-items" in r and "queued" in r for r in rows("#pushes tr")))
        wait.until(lambda d: any("cheap-red" in r for r in rows("#verdicts tbody tr")))
        clause = rows("#verdicts .clause")
        assert clause == ['color == "red"'], clause
        fired = [r for r in rows("#verdicts tbody tr") if "all-items" in r]
        assert len(fired) == 1 and "fired (creation)" in fired[0], fired
        # The test push button: queued for _alice, in the push log.
        driver.find_element(By.CSS_SELECTOR, "#test-push input[name=user]").send_keys("_alice", Keys.ENTER)
        wait.until(lambda d: any("kquery-console-test" in r and "_alice" in r for r in rows("#pushes tr")))
        driver.save_screenshot(os.path.join(SHOTS, "subscriptions.png"))

        # 6. The schema the saves taught the container, and the public database's one zone.
        driver.get(f"{BASE}/console/zones?" + urllib.parse.urlencode({"container": CONTAINER, "database": "public"}))
        wait.until(lambda d: "Item" in rows("#schema-text")[0])
        assert rows("#zone-rows tr")[0].startswith("_defaultZone"), rows("#zone-rows tr")
        # 7. Export, and import a container file as a new container.
        driver.find_element(By.ID, "export").click()
        wait.until(lambda d: rows("#data-message") == [f"exported {CONTAINER}"])
        exported = os.path.join(SHOTS, "export.container")
        request = urllib.request.Request(f"{BASE}/console/api/export?container={CONTAINER}", headers={"X-KQuery-Console": "1"})
        with urllib.request.urlopen(request) as response, open(exported, "wb") as file:
            file.write(response.read())
        driver.find_element(By.ID, "import-name").send_keys("iCloud.com.example.imported")
        driver.find_element(By.ID, "import-file").send_keys(exported)
        wait.until(lambda d: rows("#data-message") == ["imported into iCloud.com.example.imported"])
        os.remove(exported)
        driver.save_screenshot(os.path.join(SHOTS, "zones.png"))
        driver.get(f"{BASE}/console/records?" + urllib.parse.urlencode({"container": "iCloud.com.example.imported", "type": "Item"}))
        wait.until(lambda d: len(rows("#records tbody tr td.code")) == 5)
        # The import carried the assets: the poster's image previews from the copy.
        driver.get(f"{BASE}/console/records?" + urllib.parse.urlencode({"container": "iCloud.com.example.imported", "type": "Poster"}))
        wait.until(lambda d: rows("#records tbody tr td.code") == ["poster"])
        # One record, said so ("1 record in 7 ms", not "1 records").
        wait.until(lambda d: re.fullmatch(r"1 record in \d+ ms", rows("#status")[0]))
        click_row("#records tbody tr", "poster")
        wait.until(lambda d: d.execute_script("const i = document.querySelector('#record-panel img'); return i && i.complete && i.naturalWidth") == 96)
        assert "image: download" in rows("#record-panel a")[0], rows("#record-panel a")
        driver.save_screenshot(os.path.join(SHOTS, "records-asset.png"))

        # 8. Dark mode follows the system: the page's colours change with prefers-color-scheme.
        light = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        driver.get(f"{BASE}/console/requests")
        wait.until(lambda d: len(rows("#request-rows tr")) >= 3)
        dark = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert light != dark, (light, dark)
        click_row("#request-rows tr", "records/modify")
        driver.save_screenshot(os.path.join(SHOTS, "requests-dark.png"))

        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not severe, severe
        print("browser: all checks passed")
    except Exception:
        driver.save_screenshot(os.path.join(SHOTS, "failure.png"))
        print("page at failure:", driver.current_url, file=sys.stderr)
        print("browser log:", driver.get_log("browser"), file=sys.stderr)
        raise
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
