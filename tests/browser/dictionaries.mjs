// Compression Dictionary Transport (RFC 9842) in headless Chromium: loads
// a page (version 1 of a site), has the server switch to version 2 by
// renaming its pack, waits until the server answers with version 2, loads
// the page again in the same browser context (whose cache holds version
// 1's script as a dictionary), and prints one JSON line: each load's
// responses (status, Content-Encoding, the Available-Dictionary the
// browser sent) and the result the page's script left in
// `document.documentElement.dataset.result`. tests/browser_dictionaries.rs
// runs it and judges the result; this script only records.
//
// Usage: node dictionaries.mjs CHROMIUM_PATH BASE_URL PATH
// Environment: CHROMIUM_ARGS (one flag per line: the certificate is
// trusted only through --ignore-certificate-errors-spki-list, since
// Chromium keeps no dictionary from a connection whose certificate it was
// told to ignore); SWITCH_FROM and SWITCH_TO: the version 2 pack, renamed
// over the served one; VERSION_MARK: text version 2 of the page holds.

import { renameSync } from "node:fs";
import { chromium } from "playwright-core";

const [executablePath, base, path] = process.argv.slice(2);
const DEADLINE_MS = 45_000;
const TIMEOUT_MS = 15_000;

async function load(page, url) {
  const responses = [];
  const pending = [];
  const onResponse = (response) =>
    pending.push(
      Promise.all([response.allHeaders(), response.request().allHeaders()]).then(
        ([headers, sent]) =>
          responses.push({
            url: response.url(),
            status: response.status(),
            content_encoding: headers["content-encoding"] ?? null,
            use_as_dictionary: headers["use-as-dictionary"] ?? null,
            available_dictionary: sent["available-dictionary"] ?? null,
            accept_encoding: sent["accept-encoding"] ?? null,
          }),
      ),
    );
  page.on("response", onResponse);
  try {
    await page.goto(url, { waitUntil: "load", timeout: TIMEOUT_MS });
    await page.waitForLoadState("networkidle", { timeout: TIMEOUT_MS });
    await Promise.all(pending);
    const result = await page.evaluate(() => document.documentElement.dataset.result ?? null);
    return { responses, result };
  } finally {
    page.off("response", onResponse);
  }
}

async function main() {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    chromiumSandbox: false,
    args: (process.env.CHROMIUM_ARGS ?? "").split("\n").filter(Boolean),
  });
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: false });
    const page = await context.newPage();
    const url = new URL(path, base).href;
    const first = await load(page, url);
    renameSync(process.env.SWITCH_FROM, process.env.SWITCH_TO);
    // The server reloads the renamed pack on its own (inotify).
    const mark = process.env.VERSION_MARK;
    const started = Date.now();
    for (;;) {
      const text = await page.evaluate(
        (u) => fetch(u, { cache: "no-store" }).then((r) => r.text()),
        url,
      );
      if (text.includes(mark)) break;
      if (Date.now() - started > TIMEOUT_MS) throw new Error("the server never switched");
      await new Promise((r) => setTimeout(r, 100));
    }
    const second = await load(page, url);
    return { first, second, browser_version: browser.version(), error: null };
  } finally {
    await browser.close();
  }
}

const deadline = new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`no result after ${DEADLINE_MS} ms`)), DEADLINE_MS).unref(),
);
let result;
try {
  result = await Promise.race([main(), deadline]);
} catch (error) {
  result = { error: String(error?.stack ?? error) };
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
