"""The attention explorer's page: HTML, CSS and JavaScript in one string, no network, no library.

`explorer.py` fills in the title and the data; everything else is here, written for this page:
- head view: a canvas with the tokens twice, queries on the left and keys on the right, and a
  line from query i to key j for every shown head, coloured by head, opaque in proportion to
  the weight (weights under MIN_WEIGHT are not drawn); hover or click a token to see only its
  lines; head buttons toggle heads (double-click: only that head); a layer selector; for pairs,
  filters that keep sentence A or B on either side;
- model view: a thumbnail heatmap per layer x head (built when first shown); click one for a
  large labelled map with the value under the pointer, and a button that opens it in the head
  view.
Heatmap colours follow the PNGs: viridis on a square-root scale.
"""

CSS = """
:root { --ink: #1d2330; --muted: #687083; --line: #d9dde5; --accent: #2f5fb3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       background: #f6f7f9; }
header { padding: 14px 22px 10px; background: #fff; border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0 0 4px; }
header .meta { color: var(--muted); font-size: 13px; }
header .sentence { margin-top: 4px; font-size: 13px; }
header .sentence b { display: inline-block; width: 1.9em; border-left: 3px solid transparent; padding-left: 4px; }
header .sentence b.pair-A { border-color: #9ecae1; }
header .sentence b.pair-B { border-color: #fdae6b; }
nav { display: flex; gap: 4px; padding: 10px 22px 0; }
nav button { border: 1px solid var(--line); border-bottom: none; background: #eceef2; padding: 6px 14px;
             border-radius: 6px 6px 0 0; cursor: pointer; font: inherit; color: var(--muted); }
nav button.active { background: #fff; color: var(--ink); font-weight: 600; }
main { background: #fff; margin: 0 22px 22px; border: 1px solid var(--line); padding: 14px 18px;
       border-radius: 0 6px 6px 6px; }
.controls { display: flex; flex-wrap: wrap; align-items: center; gap: 10px 18px; margin-bottom: 10px; }
.controls label { color: var(--muted); font-size: 13px; }
select { font: inherit; padding: 2px 4px; }
#head-toggles { display: flex; flex-wrap: wrap; gap: 5px; margin-bottom: 8px; }
.head-toggle { --c: #888; border: 2px solid var(--c); background: var(--c); color: #fff; border-radius: 12px;
               padding: 1px 10px; font: 12px/1.6 ui-monospace, monospace; cursor: pointer; user-select: none; }
.head-toggle[aria-pressed="false"] { background: #fff; color: var(--muted); }
.small-button { border: 1px solid var(--line); background: #fff; border-radius: 4px; padding: 1px 8px;
                font-size: 12px; cursor: pointer; }
#status { min-height: 1.5em; color: var(--muted); font-size: 13px; margin: 4px 0 8px; }
#head-canvas { display: block; cursor: pointer; }
.model-grid { display: grid; gap: 6px; align-items: center; }
.model-grid .row-label, .model-grid .col-label { font-size: 11px; color: var(--muted); text-align: center; }
.model-grid .row-label { writing-mode: vertical-rl; transform: rotate(180deg); }
.thumb { width: 100%; aspect-ratio: 1; image-rendering: pixelated; border: 1px solid var(--line);
         cursor: zoom-in; display: block; }
.thumb:hover { outline: 2px solid var(--accent); }
#detail { margin-top: 16px; border-top: 1px solid var(--line); padding-top: 12px; }
#detail h2 { font-size: 15px; margin: 0 0 6px; }
#detail-status { color: var(--muted); font-size: 13px; min-height: 1.5em; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 12px; color: var(--muted); }
.legend canvas { border: 1px solid var(--line); }
.help { color: var(--muted); font-size: 12.5px; margin-top: 12px; max-width: 70em; }
"""

BODY = """
<header>
  <h1>Attention explorer</h1>
  <div class="meta" id="meta"></div>
  <div class="sentence" id="sentences"></div>
</header>
<nav>
  <button id="tab-head" class="active">Head view</button>
  <button id="tab-model">Model view</button>
</nav>
<main>
  <section id="head-view">
    <div class="controls">
      <label>layer <select id="layer-select"></select></label>
      <span id="pair-filters" hidden>
        <label>queries from <select id="from-filter">
          <option value="all">both sentences</option><option value="A">sentence A</option>
          <option value="B">sentence B</option></select></label>
        <label>keys in <select id="to-filter">
          <option value="all">both sentences</option><option value="A">sentence A</option>
          <option value="B">sentence B</option></select></label>
      </span>
      <span><button class="small-button" id="heads-all">all heads</button>
            <button class="small-button" id="heads-none">no heads</button></span>
    </div>
    <div id="head-toggles"></div>
    <div id="status"></div>
    <canvas id="head-canvas"></canvas>
    <p class="help">Each line joins a query token (left) to a key token (right) it attends to, in its
      head's colour, as opaque as the attention weight (weights under 0.01 are not drawn). Hover a
      token to see only its lines; click it to keep them; click again to let go. Click a head to show
      or hide it; double-click for that head alone.</p>
  </section>
  <section id="model-view" hidden>
    <div class="controls">
      <div class="legend">0 <canvas id="legend" width="160" height="12"></canvas> 1
        <span>attention weight (square-root colour scale); rows: queries, columns: keys</span></div>
    </div>
    <div class="model-grid" id="model-grid"></div>
    <div id="detail" hidden>
      <h2 id="detail-title"></h2>
      <div class="controls"><button class="small-button" id="detail-head-view">open in head view</button>
        <button class="small-button" id="detail-close">close</button></div>
      <div id="detail-status"></div>
      <canvas id="detail-canvas"></canvas>
    </div>
    <p class="help">One heatmap per layer (rows) and head (columns); click one to open it large with
      its token labels.</p>
  </section>
</main>
"""

JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("attention-data").textContent);
  var T = D.tokens.length, L = D.num_layers, N = D.num_heads, SCALE = D.scale;
  var PAIR = D.segments.indexOf(1) >= 0;
  var MIN_WEIGHT = 0.01;
  var TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"];
  var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142],
                 [31, 158, 137], [53, 183, 121], [110, 206, 88], [253, 231, 37]];
  var state = {layer: 0, heads: [], from: "all", to: "all", hover: null, pinned: null, detail: null};
  for (var h0 = 0; h0 < N; h0++) state.heads.push(true);

  function $(id) { return document.getElementById(id); }
  function weight(l, h, i, j) { return D.attention[l][h][i * T + j] / SCALE; }
  function headColor(h) { return N <= TAB10.length ? TAB10[h] : "hsl(" + Math.round(h * 360 / N) + ",70%,42%)"; }
  function inSegment(i, filter) { return filter === "all" || D.segments[i] === (filter === "A" ? 0 : 1); }
  function color(v) {  // viridis on a square-root scale, as the PNGs
    var t = Math.sqrt(Math.min(1, Math.max(0, v))) * (VIRIDIS.length - 1);
    var k = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - k, a = VIRIDIS[k], b = VIRIDIS[k + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  function sized(canvas, width, height) {  // a canvas sharp on high-density screens, in CSS pixels
    var r = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * r);
    canvas.height = Math.round(height * r);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(r, 0, 0, r, 0, 0);
    return ctx;
  }
  function shortToken(s) { return s.length > 16 ? s.slice(0, 15) + "\u2026" : s; }

  // ---- header ---------------------------------------------------------------------------
  $("meta").textContent = D.model + " \u2014 " + L + " layers \u00d7 " + N + " heads, " + T + " tokens";
  [["A", D.text], ["B", D.text_pair]].forEach(function (p) {
    if (p[1] === null) return;
    var div = document.createElement("div"), b = document.createElement("b");
    b.textContent = p[0];
    if (PAIR) b.className = "pair-" + p[0];  // the colour of the bars beside that sentence's tokens
    div.appendChild(b);
    div.appendChild(document.createTextNode(p[1]));
    $("sentences").appendChild(div);
  });

  // ---- head view ------------------------------------------------------------------------
  var HV = {rowH: T > 40 ? 16 : 22, font: T > 40 ? 11 : 13, width: 780, leftX: 260, rightX: 520, top: 28};
  function rowY(i) { return HV.top + i * HV.rowH + HV.rowH / 2; }
  function focus() { return state.pinned || state.hover; }

  function drawHeadView() {
    var height = HV.top + T * HV.rowH + 8, ctx = sized($("head-canvas"), HV.width, height);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, HV.width, height);
    ctx.fillStyle = "#687083";
    ctx.font = "600 12px system-ui, sans-serif";
    ctx.textAlign = "right";
    ctx.fillText("queries (attend from)", HV.leftX - 10, 14);
    ctx.textAlign = "left";
    ctx.fillText("keys (attended to)", HV.rightX + 10, 14);
    var f = focus();
    ctx.lineWidth = T > 40 ? 1.5 : 2;
    ctx.lineCap = "round";
    for (var h = 0; h < N; h++) {
      if (!state.heads[h]) continue;
      ctx.strokeStyle = headColor(h);
      for (var i = 0; i < T; i++) {
        if (!inSegment(i, state.from) || (f && f.side === "from" && f.index !== i)) continue;
        for (var j = 0; j < T; j++) {
          if (!inSegment(j, state.to) || (f && f.side === "to" && f.index !== j)) continue;
          var a = weight(state.layer, h, i, j);
          if (a < MIN_WEIGHT) continue;
          ctx.globalAlpha = Math.min(1, a);
          ctx.beginPath();
          ctx.moveTo(HV.leftX, rowY(i));
          ctx.lineTo(HV.rightX, rowY(j));
          ctx.stroke();
        }
      }
    }
    ctx.globalAlpha = 1;
    ctx.font = HV.font + "px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (var k = 0; k < T; k++) {
      drawToken(ctx, k, "from", f);
      drawToken(ctx, k, "to", f);
    }
    describeFocus(f);
  }

  function drawToken(ctx, i, side, f) {
    var left = side === "from", y = rowY(i), x = left ? HV.leftX - 10 : HV.rightX + 10;
    var text = shortToken(D.tokens[i]), w = ctx.measureText(text).width;
    var shown = inSegment(i, left ? state.from : state.to);
    if (f && f.side === side && f.index === i) {
      ctx.fillStyle = "#ffe89a";
      ctx.fillRect(left ? x - w - 4 : x - 4, y - HV.rowH / 2 + 1, w + 8, HV.rowH - 2);
    }
    if (PAIR) {  // which sentence: a thin bar between the token and its lines
      ctx.fillStyle = D.segments[i] === 0 ? "#9ecae1" : "#fdae6b";
      ctx.fillRect(left ? HV.leftX - 6 : HV.rightX + 3, y - HV.rowH / 2 + 1, 3, HV.rowH - 2);
    }
    ctx.fillStyle = shown ? "#1d2330" : "#c3c8d2";
    ctx.textAlign = left ? "right" : "left";
    ctx.fillText(text, x, y);
  }

  function describeFocus(f) {
    var status = $("status");
    if (!f) {
      status.textContent = "Hover or click a token to follow its attention.";
      return;
    }
    var heads = [], h;
    for (h = 0; h < N; h++) if (state.heads[h]) heads.push(h);
    if (!heads.length) {
      status.textContent = "No head is shown.";
      return;
    }
    var scores = [];
    for (var k = 0; k < T; k++) {
      var s = 0;
      for (h = 0; h < heads.length; h++) {
        s += f.side === "from" ? weight(state.layer, heads[h], f.index, k) : weight(state.layer, heads[h], k, f.index);
      }
      scores.push([s / heads.length, k]);
    }
    scores.sort(function (a, b) { return b[0] - a[0]; });
    var top = scores.slice(0, 4).map(function (p) { return "\u201c" + D.tokens[p[1]] + "\u201d " + p[0].toFixed(2); });
    status.textContent = "\u201c" + D.tokens[f.index] + "\u201d (" + (f.side === "from" ? "query" : "key") + ") " +
      (f.side === "from" ? "attends most to " : "is attended most by ") + top.join(", ") +
      " \u2014 mean over the " + heads.length + " shown head" + (heads.length > 1 ? "s" : "") + ", layer " + state.layer +
      (state.pinned ? " (pinned: click again to let go)" : "");
  }

  function tokenAt(event) {
    var box = $("head-canvas").getBoundingClientRect();
    var x = event.clientX - box.left, y = event.clientY - box.top;
    var i = Math.floor((y - HV.top) / HV.rowH);
    if (i < 0 || i >= T) return null;
    if (x < HV.leftX) return {side: "from", index: i};
    if (x > HV.rightX) return {side: "to", index: i};
    return null;
  }
  function same(a, b) { return a === b || (a && b && a.side === b.side && a.index === b.index); }
  $("head-canvas").addEventListener("mousemove", function (e) {
    var t = tokenAt(e);
    if (!same(t, state.hover)) { state.hover = t; drawHeadView(); }
  });
  $("head-canvas").addEventListener("mouseleave", function () {
    if (state.hover) { state.hover = null; drawHeadView(); }
  });
  $("head-canvas").addEventListener("click", function (e) {
    var t = tokenAt(e);
    state.pinned = same(t, state.pinned) ? null : t;
    drawHeadView();
  });

  function syncToggles() {
    var buttons = document.querySelectorAll(".head-toggle");
    for (var b = 0; b < buttons.length; b++) {
      buttons[b].setAttribute("aria-pressed", state.heads[+buttons[b].dataset.head] ? "true" : "false");
    }
  }
  for (var h1 = 0; h1 < N; h1++) {
    var button = document.createElement("button");
    button.className = "head-toggle";
    button.dataset.head = h1;
    button.style.setProperty("--c", headColor(h1));
    button.textContent = "head " + h1;
    button.title = "click: show or hide this head; double-click: this head alone";
    button.addEventListener("click", function () {
      var h = +this.dataset.head;
      state.heads[h] = !state.heads[h];
      syncToggles();
      drawHeadView();
    });
    button.addEventListener("dblclick", function () { solo(+this.dataset.head); });
    $("head-toggles").appendChild(button);
  }
  function solo(h) {
    for (var k = 0; k < N; k++) state.heads[k] = k === h;
    syncToggles();
    drawHeadView();
  }
  function setAll(on) {
    for (var k = 0; k < N; k++) state.heads[k] = on;
    syncToggles();
    drawHeadView();
  }
  $("heads-all").addEventListener("click", function () { setAll(true); });
  $("heads-none").addEventListener("click", function () { setAll(false); });
  syncToggles();

  for (var l0 = 0; l0 < L; l0++) {
    var option = document.createElement("option");
    option.value = l0;
    option.textContent = "layer " + l0;
    $("layer-select").appendChild(option);
  }
  $("layer-select").addEventListener("change", function () { state.layer = +this.value; drawHeadView(); });
  if (PAIR) {
    $("pair-filters").hidden = false;
    $("from-filter").addEventListener("change", function () { state.from = this.value; drawHeadView(); });
    $("to-filter").addEventListener("change", function () { state.to = this.value; drawHeadView(); });
  }

  // ---- model view -----------------------------------------------------------------------
  function paintPixels(canvas, l, h) {  // one pixel per (query, key): thumbnails
    canvas.width = T;
    canvas.height = T;
    var ctx = canvas.getContext("2d"), image = ctx.createImageData(T, T);
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        var c = color(weight(l, h, i, j)), p = 4 * (i * T + j);
        image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
      }
    }
    ctx.putImageData(image, 0, 0);
  }

  var gridBuilt = false;
  function buildGrid() {
    if (gridBuilt) return;
    gridBuilt = true;
    var grid = $("model-grid"), size = Math.max(48, Math.min(96, Math.floor(1100 / N)));
    grid.style.gridTemplateColumns = "18px repeat(" + N + ", " + size + "px)";
    grid.appendChild(document.createElement("div"));
    for (var h = 0; h < N; h++) {
      var col = document.createElement("div");
      col.className = "col-label";
      col.textContent = "head " + h;
      grid.appendChild(col);
    }
    for (var l = 0; l < L; l++) {
      var row = document.createElement("div");
      row.className = "row-label";
      row.textContent = "layer " + l;
      grid.appendChild(row);
      for (h = 0; h < N; h++) {
        var thumb = document.createElement("canvas");
        thumb.className = "thumb";
        thumb.dataset.layer = l;
        thumb.dataset.head = h;
        thumb.title = "layer " + l + ", head " + h + ": click to open";
        paintPixels(thumb, l, h);
        thumb.addEventListener("click", function () { openDetail(+this.dataset.layer, +this.dataset.head); });
        grid.appendChild(thumb);
      }
    }
    var legend = $("legend"), lctx = legend.getContext("2d");
    for (var x = 0; x < legend.width; x++) {
      var c = color(Math.pow(x / (legend.width - 1), 2));  // even steps of the square-root scale
      lctx.fillStyle = "rgb(" + c.map(Math.round).join(",") + ")";
      lctx.fillRect(x, 0, 1, legend.height);
    }
  }

  var DV = {};
  function openDetail(l, h) {
    state.detail = {layer: l, head: h};
    $("detail").hidden = false;
    $("detail-title").textContent = "layer " + l + ", head " + h;
    var cell = Math.max(7, Math.min(22, Math.floor(620 / T))), font = Math.min(12, cell - 1);
    var ctx0 = $("detail-canvas").getContext("2d");
    ctx0.font = font + "px system-ui, sans-serif";
    var labelW = 8;
    for (var k = 0; k < T; k++) labelW = Math.max(labelW, ctx0.measureText(shortToken(D.tokens[k])).width);
    DV = {cell: cell, x0: labelW + 10, y0: 6};
    var width = DV.x0 + T * cell + 10, height = DV.y0 + T * cell + labelW + 14;
    var ctx = sized($("detail-canvas"), width, height);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    for (var i = 0; i < T; i++) {
      for (var j = 0; j < T; j++) {
        ctx.fillStyle = "rgb(" + color(weight(l, h, i, j)).map(Math.round).join(",") + ")";
        ctx.fillRect(DV.x0 + j * cell, DV.y0 + i * cell, cell, cell);
      }
    }
    var boundary = D.segments.indexOf(1);
    if (boundary > 0) {
      ctx.strokeStyle = "#fff";
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(DV.x0 + boundary * cell, DV.y0);
      ctx.lineTo(DV.x0 + boundary * cell, DV.y0 + T * cell);
      ctx.moveTo(DV.x0, DV.y0 + boundary * cell);
      ctx.lineTo(DV.x0 + T * cell, DV.y0 + boundary * cell);
      ctx.stroke();
    }
    ctx.fillStyle = "#1d2330";
    ctx.font = font + "px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (k = 0; k < T; k++) {
      var text = shortToken(D.tokens[k]);
      ctx.textAlign = "right";
      ctx.fillText(text, DV.x0 - 4, DV.y0 + (k + 0.5) * cell);
      ctx.save();
      ctx.translate(DV.x0 + (k + 0.5) * cell, DV.y0 + T * cell + 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(text, 0, 0);
      ctx.restore();
    }
    $("detail-status").textContent = "Point at a cell to read its weight.";
    $("detail").scrollIntoView({block: "nearest"});
  }
  $("detail-canvas").addEventListener("mousemove", function (e) {
    if (!state.detail) return;
    var box = this.getBoundingClientRect();
    var j = Math.floor((e.clientX - box.left - DV.x0) / DV.cell), i = Math.floor((e.clientY - box.top - DV.y0) / DV.cell);
    if (i < 0 || j < 0 || i >= T || j >= T) return;
    $("detail-status").textContent = "query \u201c" + D.tokens[i] + "\u201d (" + i + ") \u2192 key \u201c" + D.tokens[j] +
      "\u201d (" + j + "): " + weight(state.detail.layer, state.detail.head, i, j).toFixed(3);
  });
  $("detail-close").addEventListener("click", function () { $("detail").hidden = true; state.detail = null; });
  $("detail-head-view").addEventListener("click", function () {
    state.layer = state.detail.layer;
    $("layer-select").value = state.layer;
    showTab("head");
    solo(state.detail.head);
  });

  // ---- tabs -----------------------------------------------------------------------------
  function showTab(name) {
    $("head-view").hidden = name !== "head";
    $("model-view").hidden = name !== "model";
    $("tab-head").classList.toggle("active", name === "head");
    $("tab-model").classList.toggle("active", name === "model");
    if (name === "model") buildGrid();
  }
  $("tab-head").addEventListener("click", function () { showTab("head"); });
  $("tab-model").addEventListener("click", function () { showTab("model"); });

  drawHeadView();
  document.body.dataset.ready = "true";
})();
"""


def page(title: str, data_json: str) -> str:
    """The whole document; `title` is HTML-escaped text, `data_json` JSON safe inside <script>."""
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{BODY}\n"
            f"<script type=\"application/json\" id=\"attention-data\">{data_json}</script>\n"
            f"<script>{JS}</script>\n</body>\n</html>\n")
