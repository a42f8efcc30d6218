// fleetwire reference: progressive enhancement only. Every page is complete without this
// script; it adds search over the generated index, copy-on-click permalinks, and opens the
// examples for printing.
(function () {
  "use strict";

  var INDEX_SCRIPT = "search-index.js";
  var MAX_RESULTS = 25;

  function loadIndex(done) {
    if (window.FLEETWIRE_SEARCH) { done(window.FLEETWIRE_SEARCH); return; }
    var existing = document.getElementById("search-index-script");
    var script = existing || document.createElement("script");
    script.addEventListener("load", function () { done(window.FLEETWIRE_SEARCH || []); });
    script.addEventListener("error", function () { done(null); });
    if (!existing) {
      script.id = "search-index-script";
      // The index is a script assigning a global, so it also loads from file://.
      script.src = INDEX_SCRIPT;
      document.head.appendChild(script);
    }
  }

  // The page this is, as the index names pages ("HostReportedState.html").
  var HERE = decodeURIComponent(location.pathname.slice(location.pathname.lastIndexOf("/") + 1)) || "index.html";

  // A query that is a place in a document: a JSON pointer ("/instances/0/meters/cpuMs",
  // array indices dropped, ~1 and ~0 unescaped) or a dotted path ("instances.meters.cpuMs").
  // Returns the dotted path, lower case, or null for a query of words.
  function pathQuery(query) {
    var q = query.trim();
    if (/\s/.test(q)) return null;
    if (q.charAt(0) === "/") {
      var parts = q.split("/").slice(1)
        .map(function (p) { return p.replace(/~1/g, "/").replace(/~0/g, "~"); })
        .filter(function (p) { return p !== "" && p !== "-" && !/^[0-9]+$/.test(p); });
      return parts.length ? parts.join(".").toLowerCase() : null;
    }
    if (q.indexOf(".") > 0 && q.charAt(q.length - 1) !== ".") return q.toLowerCase();
    return null;
  }

  // How well a path query matches an entry (lower is better, -1 none): its anchor or one of
  // its paths from a document is the path, or ends with it at a dot. A path from the document
  // of this page counts first. Returns [score, the path that matched].
  function pathScore(entry, path) {
    var here = HERE.replace(/\.html$/, "").toLowerCase();
    var best = -1, matched = null;
    var candidates = [entry.n].concat(entry.p || []);
    for (var i = 0; i < candidates.length; i++) {
      var c = candidates[i].toLowerCase();
      var s = -1;
      if (c === path) s = 0;
      else if (c.length > path.length && c.slice(-path.length - 1) === "." + path) s = 1;
      if (s < 0) continue;
      if (i > 0 && c.slice(0, here.length + 1) === here + ".") s -= 0.5;
      if (best < 0 || s < best) { best = s; matched = candidates[i]; }
    }
    return [best, matched];
  }

  // Lower score is better: exact name, name prefix, last dotted segment prefix, name
  // substring, then description matches.
  function wordScore(entry, terms) {
    var name = entry.n.toLowerCase();
    var last = name.slice(name.lastIndexOf(".") + 1);
    var desc = entry.d.toLowerCase();
    var total = 0;
    for (var i = 0; i < terms.length; i++) {
      var t = terms[i];
      if (name === t || last === t) total += 0;
      else if (last.indexOf(t) === 0 || name.indexOf(t) === 0) total += 1;
      else if (name.indexOf(t) >= 0) total += 2;
      else if (desc.indexOf(t) >= 0) total += 5;
      else return -1;
    }
    return total;
  }

  var KIND_BIAS = { document: 0, type: 0.2, operation: 0.3, variant: 0.4, field: 0.5 };

  // The anchor of a hit, and whether this page shows it: a shared type is on every page that
  // uses it, so a hit is followed on this page when it is here.
  function place(entry) {
    var hash = entry.u.indexOf("#");
    var anchor = hash >= 0 ? entry.u.slice(hash + 1) : "";
    var page = hash >= 0 ? entry.u.slice(0, hash) : entry.u;
    var here = page === HERE || (anchor && document.getElementById(anchor) !== null);
    return { anchor: anchor, here: here, href: here && anchor ? "#" + anchor : entry.u, page: here ? HERE : page };
  }

  function search(index, query) {
    var path = pathQuery(query);
    var terms = query.toLowerCase().split(/\s+/).filter(Boolean);
    if (!terms.length) return [];
    var hits = [];
    for (var i = 0; i < index.length; i++) {
      var entry = index[i];
      var s, matched = null;
      if (path) {
        var ps = pathScore(entry, path);
        s = ps[0]; matched = ps[1];
        if (s < 0 && query.charAt(0) !== "/") s = wordScore(entry, terms);
      } else {
        s = wordScore(entry, terms);
      }
      if (s < 0) continue;
      var where = place(entry);
      // Hits on this page first among equals: less than one step of name matching.
      s += (KIND_BIAS[entry.k] || 1) + (where.here ? 0 : 0.6) + entry.n.length / 1000;
      hits.push([s, { entry: entry, where: where, path: matched }]);
    }
    hits.sort(function (a, b) { return a[0] - b[0]; });
    return hits.slice(0, MAX_RESULTS).map(function (h) { return h[1]; });
  }

  // How a page is named in a result: its document, or the API or the index.
  function pageLabel(page) {
    if (page === "api.html") return "API";
    if (page === "index.html") return "Documents";
    return page.replace(/\.html$/, "");
  }

  function shorten(text, length) {
    return text.length > length ? text.slice(0, length - 1).replace(/\s+\S*$/, "") + "…" : text;
  }

  function setUpSearch() {
    var box = document.getElementById("search");
    var input = document.getElementById("search-input");
    var list = document.getElementById("search-results");
    if (!box || !input || !list) return;
    box.hidden = false;
    var index; // undefined until loaded; null when loading failed
    var selected = -1;

    function select(i) {
      var items = list.querySelectorAll("li[data-hit]");
      if (!items.length) return;
      selected = (i + items.length) % items.length;
      for (var k = 0; k < items.length; k++) {
        items[k].setAttribute("aria-selected", k === selected ? "true" : "false");
      }
      items[selected].scrollIntoView({ block: "nearest" });
    }

    function show() {
      var query = input.value.trim();
      while (list.firstChild) list.removeChild(list.firstChild);
      selected = -1;
      if (!query) { list.hidden = true; return; }
      var hits = search(index || [], query);
      if (!hits.length) {
        var none = document.createElement("li");
        none.className = "r-none";
        none.textContent = index === null
          ? "The search index (" + INDEX_SCRIPT + ") could not be loaded."
          : "Nothing matches “" + query + "”.";
        list.appendChild(none);
      }
      hits.forEach(function (found) {
        var hit = found.entry;
        var li = document.createElement("li");
        li.setAttribute("data-hit", "");
        if (found.where.here) li.setAttribute("data-here", "");
        var a = document.createElement("a");
        a.href = found.where.href;
        var kind = document.createElement("span");
        kind.className = "r-kind";
        kind.textContent = hit.k;
        var name = document.createElement("span");
        name.className = "r-name";
        name.textContent = hit.n;
        a.appendChild(kind);
        a.appendChild(name);
        if (found.path && found.path !== hit.n) {
          var path = document.createElement("span");
          path.className = "r-path";
          path.textContent = found.path;
          a.appendChild(path);
        }
        // Where the hit is and what type it has.
        var meta = document.createElement("span");
        meta.className = "r-meta";
        var page = document.createElement("span");
        page.className = "r-page";
        page.textContent = found.where.here ? "on this page (" + pageLabel(found.where.page) + ")" : pageLabel(found.where.page);
        meta.appendChild(page);
        if (hit.t) {
          var type = document.createElement("span");
          type.className = "r-type";
          type.textContent = hit.t;
          meta.appendChild(document.createTextNode(" · "));
          meta.appendChild(type);
        }
        a.appendChild(meta);
        if (hit.d) {
          var desc = document.createElement("span");
          desc.className = "r-desc";
          desc.textContent = shorten(hit.d, 140);
          a.appendChild(desc);
        }
        a.addEventListener("click", function () { list.hidden = true; });
        li.appendChild(a);
        list.appendChild(li);
      });
      list.hidden = false;
    }

    input.addEventListener("input", function () {
      if (index !== undefined) { show(); return; }
      loadIndex(function (loaded) { index = loaded; show(); });
    });
    input.addEventListener("focus", function () {
      loadIndex(function (loaded) { index = loaded; if (input.value) show(); });
    });
    input.addEventListener("keydown", function (e) {
      if (e.key === "ArrowDown") { e.preventDefault(); select(selected + 1); }
      else if (e.key === "ArrowUp") { e.preventDefault(); select(selected - 1); }
      else if (e.key === "Escape") { list.hidden = true; input.blur(); }
      else if (e.key === "Enter") {
        var items = list.querySelectorAll("li[data-hit] a");
        var target = items[selected >= 0 ? selected : 0];
        if (target) { e.preventDefault(); list.hidden = true; window.location.href = target.href; }
      }
    });
    document.addEventListener("keydown", function (e) {
      var typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement && document.activeElement.tagName);
      if (e.key === "/" && !typing) { e.preventDefault(); input.focus(); input.select(); }
    });
    document.addEventListener("click", function (e) {
      if (!box.contains(e.target)) list.hidden = true;
    });
  }

  // A permalink still navigates (so the address bar holds the link); it also copies it.
  function setUpPermalinks() {
    document.addEventListener("click", function (e) {
      var link = e.target.closest && e.target.closest("a.permalink, a.field-name");
      if (!link || !navigator.clipboard || !window.isSecureContext) return;
      navigator.clipboard.writeText(link.href).then(function () {
        link.classList.add("copied");
        setTimeout(function () { link.classList.remove("copied"); }, 1200);
      }, function () { /* copying is a convenience; the link itself still works */ });
    });
  }

  // Closed examples would print as their summaries only.
  function setUpPrinting() {
    window.addEventListener("beforeprint", function () {
      document.querySelectorAll("details").forEach(function (d) {
        if (!d.open) { d.setAttribute("data-print-opened", ""); d.open = true; }
      });
    });
    window.addEventListener("afterprint", function () {
      document.querySelectorAll("details[data-print-opened]").forEach(function (d) {
        d.removeAttribute("data-print-opened");
        d.open = false;
      });
    });
  }

  // Served by a controller, the curl lines speak to it (docs/reference-site.md, "Served by a
  // controller"): the origin the page is read from in place of the one they were written
  // with, the controller's own CA file for ca.pem, and no trust options at all for a
  // --plain-http controller (served-by.json says which). Opened from disk, they stay as written.
  function speakToTheServingFleet() {
    var marker = document.querySelector("[data-curl-server]");
    var blocks = document.querySelectorAll("pre.curl code");
    if (!marker || !blocks.length || !/^https?:$/.test(location.protocol) || !window.fetch) return;
    var written = marker.getAttribute("data-curl-server");
    var quoted = function (path) { return /^[A-Za-z0-9_.\/-]+$/.test(path) ? path : "'" + path.replace(/'/g, "'\\''") + "'"; };
    fetch("served-by.json", { cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (fleet) {
        if (!fleet) return;
        blocks.forEach(function (code) {
          var text = code.textContent.split(written).join(location.origin);
          if (fleet.plain_http) {
            text = text.replace(/^curl -s(?: --cacert \S+| --cert \S+| --key \S+| -H @\S+)+/, "curl -s");
          } else if (fleet.ca_file) {
            text = text.split("--cacert ca.pem").join("--cacert " + quoted(fleet.ca_file));
          }
          code.textContent = text;
        });
        marker.setAttribute("data-curl-served", location.origin);
      }, function () { /* the lines as written still say what to run */ });
  }

  setUpSearch();
  setUpPermalinks();
  setUpPrinting();
  speakToTheServingFleet();
})();
