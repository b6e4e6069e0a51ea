/**
 * The report's inline style and script. The page loads nothing else: the Content-Security-Policy
 * allows this one script (by hash) and no network at all, so even a mistake in escaping could
 * not run a model's `<script>` or fetch anything.
 */

export const REPORT_CSS = `
:root{--bg:#f7f7f8;--fg:#1d1d22;--muted:#6b6b76;--line:#dcdce2;--card:#fff;--pos:#1a7f37;--neg:#b42318;--zero:#8a6d00;--err:#fdecea;--errline:#e5a29b;--call:#eef4ff;--think:#f4f0fb;--code:#f1f1f4}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header.top{padding:16px 24px 8px}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:15px;margin:18px 0 8px}
.sub{color:var(--muted)}
main{padding:0 24px 40px}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:6px 12px;min-width:110px}
.card b{display:block;font-size:18px}
.card span{color:var(--muted);font-size:12px}
.panels{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,480px),1fr));grid-auto-flow:dense;gap:12px}
.panel{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 12px;overflow:auto;min-width:0}
.panel.wide{grid-column:1/-1}
.panel .errlines{max-height:300px;overflow:auto}
.panel h2{margin-top:4px}
table{border-collapse:collapse;width:100%}
td,th{padding:2px 8px;text-align:left;border-bottom:1px solid var(--line);overflow-wrap:anywhere}
th,td.num,td.key{white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.hist{display:flex;align-items:flex-end;gap:4px;height:120px;padding-top:14px}
.bar{flex:1;display:flex;flex-direction:column;justify-content:flex-end;align-items:center;height:100%;cursor:pointer;border:0;background:none;padding:0;font:inherit}
.bar i{display:block;width:100%;background:#6d8fd6;border-radius:3px 3px 0 0;min-height:1px}
.bar:hover i{background:#3f66b8}
.bar em{font-style:normal;font-size:11px;color:var(--muted)}
.bar small{font-size:11px}
.errlines{font:12px/1.5 ui-monospace,SFMono-Regular,Menlo,monospace;margin:0;padding:0;list-style:none}
.errlines li{white-space:pre-wrap;word-break:break-all}
.errlines a{color:var(--neg);text-decoration:none}
.filters{position:sticky;top:0;z-index:2;background:var(--bg);border-bottom:1px solid var(--line);padding:8px 0;display:flex;flex-wrap:wrap;gap:12px;align-items:center}
.filters input[type=number]{width:80px}
.filters button{font:inherit}
section.group{margin:12px 0;border:1px solid var(--line);border-radius:6px;background:var(--card)}
section.group>h3{margin:0;padding:6px 12px;font-size:14px;border-bottom:1px solid var(--line);background:#fbfbfc;border-radius:6px 6px 0 0}
section.group>h3 span{font-weight:normal;color:var(--muted)}
details.traj{border-top:1px solid var(--line)}
details.traj:first-of-type{border-top:0}
details.traj>summary{padding:6px 12px;cursor:pointer;list-style-position:inside}
details.traj>summary:hover{background:#f3f4f8}
details.traj[data-err]:not([data-err="0"])>summary{background:var(--err)}
.score{display:inline-block;min-width:44px;text-align:center;border-radius:4px;padding:0 6px;font-weight:600;color:#fff;background:var(--zero)}
.score.pos{background:var(--pos)}.score.neg{background:var(--neg)}.score.none{background:var(--muted)}
.bad{color:var(--neg);font-weight:600}
.meta{padding:4px 12px;color:var(--muted);font-size:12px}
.meta pre{color:var(--fg)}
ol.conv{list-style:none;margin:0;padding:4px 12px 12px}
ol.conv>li{margin:6px 0;border-left:3px solid var(--line);padding:2px 0 2px 10px}
.role{font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.03em;color:var(--muted)}
li.m-user{border-color:#7a9cd6}li.m-assistant{border-color:#5aa469}li.m-system{border-color:#b9b9c4}
li.thinking{border-color:#a58bd3;background:var(--think)}
li.call{border-color:#4f7bd9;background:var(--call)}
li.result{border-color:#9aa3b5}
li.result.err{border-color:var(--neg);background:var(--err)}
li.result .rmeta{font-size:12px;color:var(--muted)}
li.result.err .rmeta .e{color:var(--neg);font-weight:600}
pre{margin:2px 0;white-space:pre-wrap;word-break:break-word;font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
code.fn{font-weight:700}
details.more>summary,details.fold>summary{cursor:pointer;color:#3f66b8;font-size:12px}
p.cut{margin:2px 0;font-size:12px;color:var(--zero)}
.skipped li{color:var(--neg)}
[hidden]{display:none!important}
`;

/**
 * Builds a trajectory's conversation from its JSON when it is first opened (text only through
 * textContent: nothing in the data becomes markup), and runs the filters (score range, "had a
 * tool error"), expand/collapse, and opening the trajectory a link points at.
 */
export const REPORT_SCRIPT = `
(function () {
  "use strict";
  var PREVIEW_CHARS = 800, PREVIEW_LINES = 16;
  var source = document.body.getAttribute("data-source") || "the JSONL";
  var lineHref = document.body.getAttribute("data-line-href") || "";
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ms(v) { return v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(1) + " ms"; }
  function num(n) { return n.toLocaleString("en"); }
  /** A text: its head, the rest behind "show more", and what the file left out named. */
  function block(parent, t, line, cls) {
    var s = typeof t === "string" ? t : t[0], dropped = typeof t === "string" ? 0 : t[1];
    var head = s.slice(0, PREVIEW_CHARS), nl = -1;
    for (var k = 0; k < PREVIEW_LINES && nl < head.length; k++) { nl = head.indexOf("\\n", nl + 1); if (nl < 0) break; }
    if (nl >= 0 && k === PREVIEW_LINES) head = head.slice(0, nl + 1);
    parent.appendChild(el("pre", cls, head));
    if (head.length >= s.length && !dropped) return;
    var more = el("details", "more"), rest = s.slice(head.length);
    more.appendChild(el("summary", "", rest.length ? "show " + num(rest.length) + " more characters" : "truncated"));
    if (rest) more.appendChild(el("pre", cls, rest));
    if (dropped) {
      var p = el("p", "cut", "\u2702 " + num(dropped) + " more characters are not in this report: see ");
      if (lineHref) { var a = el("a", "", "line " + line); a.href = lineHref + line; p.appendChild(a); }
      else p.appendChild(document.createTextNode("line " + line));
      p.appendChild(document.createTextNode(" of " + source));
      more.appendChild(p);
    }
    parent.appendChild(more);
  }
  function fold(li, label, t, line) {
    var d = el("details", "fold");
    d.appendChild(el("summary", "", label));
    block(d, t, line);
    li.appendChild(d);
  }
  function textLength(t) { return typeof t === "string" ? t.length : t[0].length + t[1]; }
  function render(d) {
    var data = d.querySelector("script[type='application/json']");
    if (!data || d.querySelector("ol.conv")) return;
    var line = d.getAttribute("data-line"), entries = JSON.parse(data.textContent), ol = el("ol", "conv");
    for (var i = 0; i < entries.length; i++) {
      var e = entries[i], kind = e[0], turn = e[1], li;
      if (kind === "x") {
        li = el("li", "m-" + String(e[2]).replace(/[^a-z]/gi, ""));
        if (e[2] === "system") fold(li, "system prompt (" + num(textLength(e[3])) + " characters)", e[3], line);
        else { li.appendChild(el("div", "role", e[2] + (e[2] === "assistant" ? " \u00b7 turn " + turn : ""))); block(li, e[3], line); }
      } else if (kind === "k") {
        li = el("li", "thinking");
        fold(li, "thinking \u00b7 turn " + turn + " (" + num(textLength(e[2])) + " characters)", e[2], line);
      } else if (kind === "c") {
        li = el("li", "call");
        li.appendChild(el("div", "role", "tool call \u00b7 turn " + turn));
        li.appendChild(el("code", "fn", e[2]));
        block(li, e[3], line, "args");
      } else {
        li = el("li", e[5] === null ? "result" : "result err");
        li.appendChild(el("div", "role", "tool result \u00b7 turn " + turn));
        var meta = el("div", "rmeta", e[2]);
        if (e[3] !== "") meta.appendChild(document.createTextNode(e[3] === null ? " \u00b7 no exit code" : " \u00b7 exit " + e[3]));
        if (e[4] !== null) meta.appendChild(document.createTextNode(" \u00b7 " + ms(e[4])));
        if (e[5] !== null) { meta.appendChild(document.createTextNode(" \u00b7 ")); meta.appendChild(el("span", "e", "error: " + e[5])); }
        li.appendChild(meta);
        if (textLength(e[6]) === 0) li.appendChild(el("pre", "sub", "(no output)"));
        else block(li, e[6], line);
      }
      ol.appendChild(li);
    }
    d.appendChild(ol);
  }
  document.addEventListener("toggle", function (ev) {
    var d = ev.target;
    if (d.open && d.classList && d.classList.contains("traj")) render(d);
  }, true);
  var trajs = Array.prototype.slice.call(document.querySelectorAll("details.traj"));
  var groups = Array.prototype.slice.call(document.querySelectorAll("section.group"));
  var minEl = document.getElementById("f-min");
  var maxEl = document.getElementById("f-max");
  var errEl = document.getElementById("f-err");
  var countEl = document.getElementById("f-count");
  function apply() {
    var min = parseFloat(minEl.value), max = parseFloat(maxEl.value), onlyErr = errEl.checked, shown = 0;
    for (var i = 0; i < trajs.length; i++) {
      var t = trajs[i], s = parseFloat(t.getAttribute("data-score")), ok = true;
      if (!isNaN(min) && !(s >= min)) ok = false;
      if (!isNaN(max) && !(s <= max)) ok = false;
      if (onlyErr && t.getAttribute("data-err") === "0") ok = false;
      t.hidden = !ok;
      if (ok) shown++;
    }
    for (var j = 0; j < groups.length; j++) groups[j].hidden = !groups[j].querySelector("details.traj:not([hidden])");
    countEl.textContent = shown + " of " + trajs.length + " trajectories shown";
  }
  minEl.addEventListener("input", apply);
  maxEl.addEventListener("input", apply);
  errEl.addEventListener("change", apply);
  document.getElementById("f-clear").addEventListener("click", function () {
    minEl.value = ""; maxEl.value = ""; errEl.checked = false; apply();
  });
  function setOpen(open) {
    for (var i = 0; i < trajs.length; i++) if (!trajs[i].hidden) trajs[i].open = open;
  }
  document.getElementById("f-expand").addEventListener("click", function () { setOpen(true); });
  document.getElementById("f-collapse").addEventListener("click", function () { setOpen(false); });
  Array.prototype.forEach.call(document.querySelectorAll("button.bar"), function (b) {
    b.addEventListener("click", function () {
      minEl.value = b.getAttribute("data-min"); maxEl.value = b.getAttribute("data-max"); apply();
    });
  });
  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var t = id && document.getElementById(id);
    if (!t || !t.classList.contains("traj")) return;
    if (t.hidden) { minEl.value = ""; maxEl.value = ""; errEl.checked = false; apply(); }
    t.open = true;
    t.scrollIntoView();
  }
  window.addEventListener("hashchange", reveal);
  apply();
  reveal();
  document.documentElement.setAttribute("data-ready", "1");
})();
`;
