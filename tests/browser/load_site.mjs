// Loads pages of a site in headless Chromium, each in a fresh browser
// context (an empty cache, so every resource comes from the server), then
// reloads the first page (revalidation: 304s and cache hits), and prints
// one JSON line describing what the browser saw. tests/browser_https.rs
// runs it and judges the result; this script only records.
//
// Usage: node load_site.mjs CHROMIUM_PATH BASE_URL PATH...
// CHROMIUM_ARGS (environment, one per line): extra browser flags, such
// as --disable-http2 for the HTTP/1.1 run. VERIFY_CERTIFICATES=1: check
// the server's certificate as a browser does (trusted only through the
// flags), instead of taking any.

import { chromium } from "playwright-core";

const [executablePath, base, ...paths] = process.argv.slice(2);
const ignoreHTTPSErrors = process.env.VERIFY_CERTIFICATES !== "1";

// Below the Rust test's own limit, so a stuck browser still yields a
// report that says where it stuck instead of a killed process.
const DEADLINE_MS = 45_000;
const NAVIGATION_TIMEOUT_MS = 15_000;

// What one page load produced: every response and failed request of the
// page, the Resource Timing entries the page itself saw, and any error it
// logged.
async function record(page, navigate) {
  const responses = [];
  const failed = [];
  const errors = [];
  const pending = [];
  const onResponse = (response) => {
    // allHeaders() is asynchronous; the load is judged after all of them
    // have been read.
    pending.push(
      response.allHeaders().then(async (headers) => {
        const security = await response.securityDetails();
        responses.push({
          url: response.url(),
          status: response.status(),
          type: response.request().resourceType(),
          content_encoding: headers["content-encoding"] ?? null,
          tls: security?.protocol ?? null,
        });
      }),
    );
  };
  const onFailed = (request) =>
    failed.push({ url: request.url(), error: request.failure()?.errorText ?? "unknown" });
  const onConsole = (message) => {
    if (message.type() === "error") errors.push(`console: ${message.text()}`);
  };
  const onPageError = (error) => errors.push(`page error: ${error.message}`);
  page.on("response", onResponse);
  page.on("requestfailed", onFailed);
  page.on("console", onConsole);
  page.on("pageerror", onPageError);
  try {
    await navigate();
    // "load" has fired; the network going quiet also covers anything the
    // page's module script fetched after it.
    await page.waitForLoadState("networkidle", { timeout: NAVIGATION_TIMEOUT_MS });
    await Promise.all(pending);
    const timing = await page.evaluate(() =>
      performance.getEntries()
        .filter((e) => e.entryType === "navigation" || e.entryType === "resource")
        .map((e) => ({
          name: e.name,
          entry_type: e.entryType,
          next_hop_protocol: e.nextHopProtocol,
          // Also set for the requests Playwright's events never show
          // (the favicon the browser fetches on its own).
          response_status: e.responseStatus,
          transfer_size: e.transferSize,
        })),
    );
    return { url: page.url(), responses, failed, errors, timing };
  } finally {
    page.off("response", onResponse);
    page.off("requestfailed", onFailed);
    page.off("console", onConsole);
    page.off("pageerror", onPageError);
  }
}

async function main() {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    // With its sandbox on, Chromium refuses to start as root, and a
    // container often lacks the namespaces the sandbox needs; the browser
    // loads only the test's own server.
    chromiumSandbox: false,
    args: (process.env.CHROMIUM_ARGS ?? "").split("\n").filter(Boolean),
  });
  try {
    const pages = [];
    for (const path of paths) {
      const context = await browser.newContext({ ignoreHTTPSErrors });
      try {
        const page = await context.newPage();
        const url = new URL(path, base).href;
        pages.push({
          path,
          ...(await record(page, () =>
            page.goto(url, { waitUntil: "load", timeout: NAVIGATION_TIMEOUT_MS }),
          )),
        });
      } finally {
        await context.close();
      }
    }

    const context = await browser.newContext({ ignoreHTTPSErrors });
    let reload;
    try {
      const page = await context.newPage();
      await page.goto(new URL(paths[0], base).href, {
        waitUntil: "load",
        timeout: NAVIGATION_TIMEOUT_MS,
      });
      await page.waitForLoadState("networkidle", { timeout: NAVIGATION_TIMEOUT_MS });
      reload = {
        path: paths[0],
        ...(await record(page, () =>
          page.reload({ waitUntil: "load", timeout: NAVIGATION_TIMEOUT_MS }),
        )),
      };
    } finally {
      await context.close();
    }
    return { pages, reload, browser_version: browser.version(), error: null };
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
// A browser stuck past the deadline must not keep this process alive.
process.exit(0);
