// optiml report: the page's glue. The pictures are Vega specs made in Python (specs.py); this
// script embeds them with vega-embed, keeps large sibling groups of the tree collapsed, and shows
// a candidate's details (unpacked from the gzip+base64 blob) when a node or a point is clicked.
(function () {
  "use strict";
  var LIMIT = 8;      // a node with more children than this shows SHOW of them and a "+N more" node
  var SHOW = 5;
  var LABEL = 40;     // characters of an edit written on its edge (the tooltip has it all)
  var ROW = 20, COLUMN = 210;

  var view = JSON.parse(document.getElementById("report-view").textContent);
  var nodes = view.nodes;
  var byId = new Map(nodes.map(function (n) { return [n.id, n]; }));
  var kids = new Map();
  nodes.forEach(function (n) {
    if (n.parent == null) return;
    if (!kids.has(n.parent)) kids.set(n.parent, []);
    kids.get(n.parent).push(n);
  });
  var expanded = new Set(), allOpen = false, selected = null, shownKeys = new Set();
  var chartView = null, treeView = null;
  var embedOptions = {renderer: "svg", actions: {export: true, source: false, compiled: false, editor: false}};

  var details = unpack(document.getElementById("report-details").textContent.trim());

  function unpack(b64) {
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(JSON.parse);
  }

  function ancestors(id) {
    var out = new Set(), n = byId.get(id);
    while (n && n.parent != null) { out.add(n.parent); n = byId.get(n.parent); }
    return out;
  }

  function clip(s) { return s.length > LABEL ? s.slice(0, LABEL - 1) + "\u2026" : s; }

  // The tree's visible rows: every node, except that a large sibling group not opened shows the
  // children on the path to the best or to the selected node, then the fastest, up to SHOW.
  function visibleRows() {
    var keep = selected == null ? new Set() : ancestors(selected);
    if (selected != null) keep.add(selected);
    var rows = [], more = [], leaves = 0, deepest = 0;
    var root = nodes.find(function (n) { return n.parent == null; });
    if (!root) return {rows: rows, leaves: 0, deepest: 0};
    var stack = [root];
    while (stack.length) {
      var n = stack.pop();
      rows.push(Object.assign({key: String(n.id), parentKey: n.parent == null ? null : String(n.parent),
                               label: n.parent == null ? (view.base === "the seed" ? "seed" : "root") : clip(n.edit || "")}, n));
      deepest = Math.max(deepest, n.depth);
      var ch = kids.get(n.id) || [];
      if (ch.length > LIMIT && !allOpen && !expanded.has(n.id)) {
        var must = ch.filter(function (c) { return c.path || keep.has(c.id); });
        var rest = ch.filter(function (c) { return !(c.path || keep.has(c.id)); }).sort(function (a, b) {
          return ((b.speedup == null ? -1 : b.speedup) - (a.speedup == null ? -1 : a.speedup)) || (a.id - b.id);
        });
        var picked = new Set(must.concat(rest.slice(0, Math.max(0, SHOW - must.length))).map(function (c) { return c.id; }));
        var hidden = ch.length - picked.size;
        ch = ch.filter(function (c) { return picked.has(c.id); });
        more.push({key: "more-" + n.id, parentKey: String(n.id), more: hidden, label: "+" + hidden + " more",
                   depth: n.depth + 1, speedup: null, status: "collapsed"});
        leaves++;
      }
      if (!ch.length) leaves++;
      for (var i = ch.length - 1; i >= 0; i--) stack.push(ch[i]);
    }
    return {rows: rows.concat(more), leaves: leaves, deepest: deepest};
  }

  function drawTree() {
    var v = visibleRows();
    shownKeys = new Set(v.rows.map(function (r) { return r.key; }));
    var spec = JSON.parse(JSON.stringify(view.tree));
    spec.data[0].values = v.rows;
    spec.height = Math.max(140, v.leaves * ROW);
    spec.width = Math.max(320, v.deepest * COLUMN);
    spec.signals[0].value = selected == null ? "" : String(selected);
    if (treeView) treeView.finalize();
    return vegaEmbed("#tree", spec, Object.assign({mode: "vega"}, embedOptions)).then(function (res) {
      treeView = res.view;
      treeView.addEventListener("click", function (event, item) {
        var d = item && item.datum;
        if (!d) return;
        if (d.more) { expanded.add(Number(d.parentKey)); drawTree(); }
        else if (d.id != null) select(d.id, false);
      });
    });
  }

  function scrollTreeTo(id) {
    if (!treeView) return;
    var d = treeView.data("tree").find(function (r) { return r.key === String(id); });
    var box = document.getElementById("tree-scroll");
    if (!d || !box) return;
    var pad = treeView.padding();
    box.scrollTo({left: Math.max(0, d.x + pad.left - box.clientWidth / 2),
                  top: Math.max(0, d.y + pad.top + 60 - box.clientHeight / 2)});
  }

  function select(id, fromElsewhere) {
    if (!byId.has(id)) return Promise.resolve();
    selected = id;
    try { history.replaceState(null, "", "#node=" + id); } catch (e) { /* a sandboxed viewer */ }
    if (chartView) chartView.signal("sel", id).runAsync();
    var redraw = !shownKeys.has(String(id)) ? drawTree()
      : treeView ? treeView.signal("selected", String(id)).runAsync() : Promise.resolve();
    return Promise.all([details, redraw]).then(function (all) {
      showDetails(all[0], id);
      if (fromElsewhere) scrollTreeTo(id);
    });
  }

  // ---------------------------------------------------------------- the candidate panel
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text != null) e.textContent = text;
    return e;
  }

  function nodeLink(id) {
    var a = el("a", {href: "#node=" + id, "data-node": String(id)}, "node " + id);
    return a;
  }

  function fmt(v, digits) { return v == null ? "-" : Number(v).toPrecision(digits || 4).replace(/\.?0+$/, ""); }

  function diffBlock(text) {
    var pre = el("pre", {"class": "diff"});
    text.split("\n").forEach(function (line) {
      var cls = line.startsWith("@@") ? "hunk" : (line.startsWith("+") && !line.startsWith("+++")) ? "add"
        : (line.startsWith("-") && !line.startsWith("---")) ? "del" : null;
      var span = el("span", cls ? {"class": cls} : null, line + "\n");
      pre.appendChild(span);
    });
    return pre;
  }

  function section(box, title, child) {
    box.appendChild(el("h4", null, title));
    if (child) box.appendChild(child);
  }

  function showDetails(d, id) {
    var n = d.nodes[String(id)], box = document.getElementById("details");
    box.replaceChildren();
    box.dataset.node = String(id);
    var h = el("h3");
    h.appendChild(document.createTextNode("node " + id + " "));
    h.appendChild(el("span", {"class": "status", style: "color:" + (view.statuses[n.status] || "#4c4c4c")}, n.status));
    box.appendChild(h);
    var meta = el("p", {"class": "muted"});
    meta.appendChild(document.createTextNode("depth " + n.depth + ", "));
    if (n.parent != null) { meta.appendChild(document.createTextNode("parent ")); meta.appendChild(nodeLink(n.parent)); }
    else meta.appendChild(document.createTextNode(view.base === "the seed" ? "the seed" : "the root"));
    meta.appendChild(document.createTextNode(", proposer " + (n.proposer || "-") +
      (n.wall_s != null ? ", evaluated in " + fmt(n.wall_s, 3) + " s" : "")));
    box.appendChild(meta);
    if (n.ms != null) {
      var t = "time " + fmt(n.ms) + " ms" + (n.spread != null ? " (spread " + (100 * n.spread).toFixed(1) + " %)" : "");
      if (n.vs_parent != null) t += "; " + n.vs_parent.toFixed(2) + "x vs parent";
      if (n.vs_seed != null) t += "; " + n.vs_seed.toFixed(2) + "x vs " + (view.base === "the seed" ? "seed" : view.base);
      box.appendChild(el("p", {"class": "time"}, t));
    }
    if (n.edit) section(box, "edit", el("code", null, n.edit));
    if (n.rationale) section(box, "why", el("p", {"class": "rationale"}, n.rationale));
    if (n.parent_flags != null) section(box, "nvcc flags", el("code", null, (n.parent_flags || "(none)") + "  \u2192  " + (n.flags || "(none)")));
    else if (n.flags) section(box, "nvcc flags", el("code", null, n.flags));
    if (n.message || n.verify_facts) {
      section(box, n.status === "ok" ? "message" : "verification / failure",
              el("pre", {"class": "wrap message"}, [n.message, n.verify_facts].filter(Boolean).join("\n")));
    }
    if (n.sanitize) box.appendChild(el("p", {"class": "muted"}, n.sanitize));
    if (n.diff != null) section(box, "diff to parent node " + n.parent, n.diff ? diffBlock(n.diff) : el("p", {"class": "muted"}, "(same source)"));
    if (n.resources.length) {
      var table = el("table", {"class": "resources"}), hr = el("tr");
      ["ptxas", n.parent != null ? "parent" : "", "this"].forEach(function (c) { hr.appendChild(el("th", null, c)); });
      table.appendChild(hr);
      n.resources.forEach(function (r) {
        var tr = el("tr");
        tr.appendChild(el("td", null, r[0]));
        tr.appendChild(el("td", {"class": "num"}, r[1] == null ? "" : String(r[1])));
        tr.appendChild(el("td", {"class": "num"}, String(r[2])));
        table.appendChild(tr);
      });
      section(box, "resources", table);
    }
    if (n.metrics.length) {
      section(box, n.parent != null ? "metrics that changed most vs parent" : "metrics (" + n.metric_count + ")",
              el("pre", {"class": "metrics"}, n.metrics.join("\n")));
    } else if (n.metric_count) {
      section(box, "metrics", el("p", {"class": "muted"}, n.metric_count + " recorded, none changed against the parent"));
    }
    if (n.diagnosis.length) {
      var ul = el("ul", {"class": "diagnosis"});
      n.diagnosis.forEach(function (s) { ul.appendChild(el("li", null, s)); });
      section(box, "diagnosis", ul);
    }
    if (n.build_log) {
      var bl = el("details", {open: ""});
      bl.appendChild(el("summary", null, "build log"));
      bl.appendChild(el("pre", {"class": "wrap"}, n.build_log));
      box.appendChild(bl);
    }
    if (n.exchange != null && d.exchanges[String(n.exchange)]) {
      var x = d.exchanges[String(n.exchange)];
      section(box, "LLM exchange " + x.id, el("p", {"class": "muted"}, (x.proposer || "-") + " / " + (x.model || "-") + ": " +
              (x.tokens_in || 0) + " tokens in, " + (x.tokens_out || 0) + " out, " + fmt(x.latency_s, 3) + " s" +
              (x.error ? "; error: " + x.error : "")));
      [["prompt", x.prompt, false], ["answer", x.answer, true]].forEach(function (p) {
        if (!p[1]) return;
        var dd = el("details", p[2] ? {open: "", "class": p[0]} : {"class": p[0]});
        dd.appendChild(el("summary", null, p[0]));
        dd.appendChild(el("pre", {"class": "wrap"}, p[1]));
        box.appendChild(dd);
      });
    }
    if (n.attempts.length) {
      var ua = el("ul");
      n.attempts.forEach(function (a) { ua.appendChild(el("li", null, a[0] + ": " + a[1] + (a[2] ? ": " + a[2] : ""))); });
      section(box, "tried from this node without a new candidate", ua);
    }
    var src = el("details", n.parent == null ? {open: "", "class": "source"} : {"class": "source"});
    src.appendChild(el("summary", null, "source " + n.source.slice(0, 12)));
    src.appendChild(el("pre", null, d.sources[n.source]));
    box.appendChild(src);
    var kidsOf = kids.get(id) || [];
    if (kidsOf.length) {
      var p = el("p", {"class": "muted"}, kidsOf.length + " children: ");
      kidsOf.slice(0, 30).forEach(function (c, i) { if (i) p.appendChild(document.createTextNode(", ")); p.appendChild(nodeLink(c.id)); });
      if (kidsOf.length > 30) p.appendChild(document.createTextNode(", ..."));
      box.appendChild(p);
    }
  }

  // ---------------------------------------------------------------- wiring
  document.addEventListener("click", function (event) {
    var a = event.target.closest && event.target.closest("a[data-node]");
    if (!a) return;
    event.preventDefault();
    select(Number(a.getAttribute("data-node")), true);
  });
  document.getElementById("expand-all").addEventListener("click", function (event) {
    allOpen = !allOpen;
    event.target.textContent = allOpen ? "collapse large groups" : "open all groups";
    drawTree();
  });

  var chart = vegaEmbed("#chart", view.chart, embedOptions).then(function (res) {
    chartView = res.view;
    chartView.addEventListener("click", function (event, item) {
      var d = item && item.datum;
      if (d && d.node != null) select(d.node, true);
    });
  });
  Promise.all([chart, drawTree(), details]).then(function () {
    var m = /node=(\d+)/.exec(location.hash);
    return m ? select(Number(m[1]), true) : null;
  }).then(function () {
    document.body.dataset.readyMs = String(Math.round(performance.now()));
    document.body.dataset.ready = "1";
  }).catch(function (err) {
    document.body.dataset.error = String(err && err.stack || err);
    var p = el("p", {"class": "error"}, "The report could not be drawn: " + err);
    document.body.insertBefore(p, document.body.firstChild);
    throw err;
  });
  window.optimlReport = {select: select};
})();
