// The live preview in headless Chromium: opens a page of `kiln serve DIR
// --watch`, waits for its event stream to be open, then saves files of
// the site as an editor would and waits for the open page to show them,
// never reloading or navigating it itself: a stylesheet (the page keeps
// its state: swapped in place), then the page (the page reloads itself),
// then the page again while the tab is hidden (shown once it is shown).
// Prints one JSON line: what the page showed, when, and how.
// tests/browser_live_reload.rs runs it and judges the result.
//
// Usage: node live_reload.mjs CHROMIUM_PATH BASE_URL SITE_DIR RUN
// RUN names this run: its colour and heading are written into the site.
// CHROMIUM_ARGS (environment, one per line): extra browser flags.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [executablePath, base, siteDir, run] = process.argv.slice(2);

const DEADLINE_MS = 45_000;
// How long a change may take to show before the run says it never did:
// far beyond the second it should take, so that a slow machine is told
// apart from a change that never arrives.
const SHOW_TIMEOUT_MS = 10_000;

const page = (heading) =>
  `<!doctype html><html><head><title>${run}</title>` +
  `<link rel="stylesheet" href="/style.css"></head>` +
  `<body><h1>${heading}</h1><p>A page of the live preview test.</p></body></html>\n`;

async function main() {
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    chromiumSandbox: false,
    args: (process.env.CHROMIUM_ARGS ?? "").split("\n").filter(Boolean),
  });
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const tab = await context.newPage();
    const errors = [];
    tab.on("console", (m) => m.type() === "error" && errors.push(`console: ${m.text()}`));
    tab.on("pageerror", (e) => errors.push(`page error: ${e.message}`));
    let navigations = 0;
    tab.on("framenavigated", (frame) => {
      if (frame === tab.mainFrame()) navigations += 1;
    });
    const open = () =>
      tab.waitForFunction(() => window.__kilnLive?.state === "open", null, {
        timeout: SHOW_TIMEOUT_MS,
      });

    await tab.goto(new URL("/", base).href, { waitUntil: "load", timeout: 15_000 });
    await open();
    const protocol = await tab.evaluate(
      () => performance.getEntriesByType("navigation")[0]?.nextHopProtocol ?? null,
    );
    const navigationsAtStart = navigations;
    // State a reload would lose.
    await tab.evaluate(() => {
      window.__kept = "kept";
    });

    // A stylesheet saved: its new colour shows, the page is not reloaded.
    const savedCss = performance.now();
    writeFileSync(join(siteDir, "style.css"), "h1 { color: rgb(0, 0, 255) }\n");
    await tab.waitForFunction(
      () => getComputedStyle(document.querySelector("h1")).color === "rgb(0, 0, 255)",
      null,
      { timeout: SHOW_TIMEOUT_MS, polling: 10 },
    );
    const cssMs = performance.now() - savedCss;
    const afterCss = await tab.evaluate(() => ({
      kept: window.__kept ?? null,
      swaps: window.__kilnLive.swaps,
      stylesheets: [...document.querySelectorAll('link[rel="stylesheet"]')].map((l) => l.href),
    }));
    const navigationsAfterCss = navigations;

    // The page saved: the open page shows its new heading by itself.
    const savedPage = performance.now();
    writeFileSync(join(siteDir, "index.html"), page(`${run}: second`));
    await tab.waitForFunction(
      (heading) => document.querySelector("h1")?.textContent === heading,
      `${run}: second`,
      { timeout: SHOW_TIMEOUT_MS, polling: 10 },
    );
    const pageMs = performance.now() - savedPage;
    const afterPage = await tab.evaluate(() => ({ kept: window.__kept ?? null }));
    await open();

    // A hidden tab lets its stream go; a page saved meanwhile shows once
    // the tab is shown again (its stream's hello names a new generation).
    const setHidden = (hidden) =>
      tab.evaluate((hidden) => {
        Object.defineProperty(document, "hidden", { value: hidden, configurable: true });
        document.dispatchEvent(new Event("visibilitychange"));
        return window.__kilnLive.state;
      }, hidden);
    const stateWhenHidden = await setHidden(true);
    writeFileSync(join(siteDir, "index.html"), page(`${run}: third`));
    const served = Date.now();
    while (!(await (await context.request.get(new URL("/", base).href)).text()).includes(`${run}: third`)) {
      if (Date.now() - served > SHOW_TIMEOUT_MS) throw new Error("the third page was never served");
      await new Promise((done) => setTimeout(done, 20));
    }
    const headingWhileHidden = await tab.evaluate(() => document.querySelector("h1").textContent);
    const shown = performance.now();
    await setHidden(false);
    await tab.waitForFunction(
      (heading) => document.querySelector("h1")?.textContent === heading,
      `${run}: third`,
      { timeout: SHOW_TIMEOUT_MS, polling: 10 },
    );
    const shownMs = performance.now() - shown;

    return {
      protocol,
      css_ms: Math.round(cssMs),
      page_ms: Math.round(pageMs),
      kept_after_css: afterCss.kept,
      swaps: afterCss.swaps,
      stylesheets_after_css: afterCss.stylesheets,
      navigations_after_css: navigationsAfterCss - navigationsAtStart,
      kept_after_page: afterPage.kept,
      state_when_hidden: stateWhenHidden,
      heading_while_hidden: headingWhileHidden,
      shown_ms: Math.round(shownMs),
      navigations_after_page: navigations - navigationsAtStart,
      errors,
      browser_version: browser.version(),
      error: null,
    };
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
