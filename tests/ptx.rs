//! The built PTX: every entry the host can launch is in it, with the parameter struct the
//! host passes; every float instruction is a form the spec allows; the layer step keeps its
//! readiness protocol. (That every kernel assembles with ptxas without spills is
//! `tests/ptxas.rs`.)

#[test]
fn every_host_entry_is_in_the_ptx() {
    let entries = rgdn::kernels::ptx_entries();
    for e in rgdn::kernels::all_entries() {
        assert!(entries.contains(&e), "entry {e} is missing from the PTX (has {entries:?})");
    }
}

#[test]
fn the_ptx_targets_the_configured_arch_and_uses_ftz_math() {
    let ptx = rgdn::kernels::PTX;
    assert!(ptx.contains(&format!(".target {}", rgdn::kernels::PTX_ARCH)));
    // The kernels' float arithmetic is all explicit .ftz (no plain add.rn.f32 from Rust ops).
    for plain in ["add.rn.f32", "mul.rn.f32", "fma.rn.f32"] {
        assert!(!ptx.contains(plain), "the PTX contains `{plain}`: a float op bypassed device::math");
    }
    for needed in ["fma.rn.ftz.f32", "ex2.approx.ftz.f32", "div.approx.ftz.f32", "rsqrt.approx.ftz.f32", "shfl.sync.bfly.b32"] {
        assert!(ptx.contains(needed), "the PTX lacks `{needed}`");
    }
}

#[test]
fn kernels_have_no_panic_paths() {
    // Indexing, division and overflow checks would pull in core's panic machinery (a trap with
    // message data): kernels must make such paths impossible instead.
    let ptx = rgdn::kernels::PTX;
    let funcs: Vec<&str> = ptx.lines().filter(|l| l.starts_with(".func") && l.contains("panic")).collect();
    assert!(funcs.is_empty(), "panic paths in the PTX: {funcs:?}");
}

/// [convchain] The fused conv chain indexes its parameter tables only with literal indices: a
/// runtime index would copy the 272-byte parameter block to local memory (stack) in every thread.
#[test]
fn gdn_conv_chain_entries_use_no_local_memory() {
    let ptx = rgdn::kernels::PTX;
    for d in rgdn::kernels::abi::GDN_CONV_CHAIN_WIDTHS {
        for entry in rgdn::kernels::abi::gdn_conv_chain_entries(d).unwrap() {
            let body = entry_body(ptx, entry);
            for local in ["__local_depot", ".local", "%SPL"] {
                assert!(!body.contains(local), "{entry} uses local memory (`{local}` in its PTX)");
            }
        }
    }
}

// ---- [exactness] every float instruction is a form the spec allows ---------------------------

/// The float-typed PTX instructions the spec allows (`docs/spec.md`
/// §0.1–0.2 and the per-operation table): the `.ftz` arithmetic ggml's fast-math build runs,
/// with an explicit `.rn` on every add/sub/mul/fma so that ptxas cannot contract them; the
/// MUFU approximations in their `.approx.ftz` forms; `max.ftz`; ordered `.ftz` compares; the
/// half2 accumulation `fma.rn.f16x2` (no ftz, as ggml's HFMA2); and exact conversions. Loads,
/// stores and moves of float values are exact and allowed through [`is_exact_float_move`].
const ALLOWED_FLOAT_FORMS: &[&str] = &[
    "add.rn.ftz.f32",
    "sub.rn.ftz.f32",
    "mul.rn.ftz.f32",
    "fma.rn.ftz.f32",
    "max.ftz.f32",
    "ex2.approx.ftz.f32",
    "lg2.approx.ftz.f32",
    "rcp.approx.ftz.f32",
    "rsqrt.approx.ftz.f32",
    "div.approx.ftz.f32",
    "setp.eq.ftz.f32",
    "setp.ne.ftz.f32",
    "setp.lt.ftz.f32",
    "setp.le.ftz.f32",
    "setp.gt.ftz.f32",
    "setp.ge.ftz.f32",
    "fma.rn.f16x2",
    "cvt.rn.f16.f32",
    "cvt.f32.f16",
    "cvt.f32.bf16",
];

/// Float types that make an instruction a float instruction.
const FLOAT_TYPES: &[&str] = &["f32", "f16", "bf16", "f16x2", "bf16x2", "f64"];

/// A load, store, move or select of float data: the bits travel unchanged.
fn is_exact_float_move(opcode: &str) -> bool {
    let parts: Vec<&str> = opcode.split('.').collect();
    let Some((&ty, rest)) = parts.split_last() else { return false };
    if !FLOAT_TYPES.contains(&ty) || ty == "f64" {
        return false;
    }
    match rest {
        // `selp` picks one of two registers by a predicate: no rounding, the bits unchanged.
        ["mov"] | ["selp"] => true,
        [op, space, qualifiers @ ..] if (*op == "ld" || *op == "st") && ["global", "shared", "param", "local", "const"].contains(space) => {
            qualifiers.iter().all(|q| ["nc", "v2", "v4"].contains(q))
        }
        _ => false,
    }
}

/// Every instruction of `ptx` whose opcode names a float type and is neither an allowed form
/// nor an exact move, as "entry: line N: instruction".
fn disallowed_float_instructions(ptx: &str) -> Vec<String> {
    let mut entry = "<module>";
    let mut bad = Vec::new();
    for (n, line) in ptx.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("").trim();
        if let Some(rest) =
            code.strip_prefix(".visible .entry ").or_else(|| code.strip_prefix(".entry ")).or_else(|| code.split(".func ").nth(1))
        {
            entry = rest.split(['(', ' ']).find(|s| !s.is_empty()).unwrap_or(rest);
            continue;
        }
        // An optional predicate guard (`@%p1`, `@!%p1`), then the opcode.
        let code = if code.starts_with('@') { code.split_once(char::is_whitespace).map_or("", |(_, r)| r.trim_start()) } else { code };
        let opcode = code.split(|c: char| c.is_whitespace() || c == ';').next().unwrap_or("");
        if opcode.is_empty() || opcode.starts_with('.') || opcode.ends_with(':') || opcode.starts_with('{') || opcode.starts_with('}') {
            continue;
        }
        if !opcode.split('.').skip(1).any(|p| FLOAT_TYPES.contains(&p)) {
            continue;
        }
        if !ALLOWED_FLOAT_FORMS.contains(&opcode) && !is_exact_float_move(opcode) {
            bad.push(format!("{entry}: line {}: {code}", n + 1));
        }
    }
    bad
}

#[test]
fn every_float_instruction_is_a_form_the_spec_allows() {
    let bad = disallowed_float_instructions(rgdn::kernels::PTX);
    assert!(bad.is_empty(), "{} float instructions in forms the spec does not allow:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn the_float_form_check_refuses_what_the_spec_does_not_allow() {
    let ptx = "\
.visible .entry k_one(
\t.param .u64 p
)
{
\tadd.rn.ftz.f32 \t%f1, %f2, %f3;
\tld.global.nc.f32 \t%f4, [%rd1];
\t@%p1 bra \tLBB0_2;
\tsub.f32 \t%f5, %f1, %f4;
\tmin.f32 \t%f6, %f1, %f4;
\tdiv.rn.f32 \t%f7, %f1, %f4;
\tsqrt.approx.f32 \t%f8, %f1;
\tex2.approx.f32 \t%f9, %f1;
\t@!%p2 add.rn.f32 \t%f1, %f2, %f3;
\tsetp.gtu.ftz.f32 \t%p3, %f1, %f2;
\tcvt.rzi.f32.f32 \t%f1, %f2;
}
.visible .entry k_two(
)
{
\tmax.f32 \t%f1, %f2, %f3;
\tmax.ftz.f32 \t%f1, %f2, %f3;
}
";
    let bad = disallowed_float_instructions(ptx);
    let lines: Vec<&str> = bad.iter().map(|b| b.split(": ").nth(2).unwrap_or("").split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(
        lines,
        [
            "sub.f32",
            "min.f32",
            "div.rn.f32",
            "sqrt.approx.f32",
            "ex2.approx.f32",
            "add.rn.f32",
            "setp.gtu.ftz.f32",
            "cvt.rzi.f32.f32",
            "max.f32"
        ],
        "{bad:#?}"
    );
    assert!(bad[0].starts_with("k_one: line 8: "), "{}", bad[0]);
    assert!(bad[8].starts_with("k_two: line 20: "), "{}", bad[8]);
}

/// One `.param` line of an entry's PTX signature.
#[derive(Debug, PartialEq)]
enum PtxParam {
    /// `.param .align A .b8 name[N]`: a by-value struct of N bytes, alignment A.
    Bytes { align: usize, size: usize },
    /// A scalar (`.param .u64 …`, `.param .u32 …`, `.param .f32 …`, …).
    Scalar(String),
}

/// The parameter list of each `.entry` in `ptx`, in declaration order.
fn ptx_param_lists(ptx: &str) -> Vec<(String, Vec<PtxParam>)> {
    let mut out = Vec::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") else { continue };
        let name = rest.split('(').next().unwrap_or(rest).trim().to_string();
        let mut params = Vec::new();
        for line in lines.by_ref() {
            let line = line.trim().trim_end_matches(',');
            if line.starts_with(')') {
                break;
            }
            let Some(decl) = line.strip_prefix(".param ") else { panic!("{name}: unexpected line in the parameter list: `{line}`") };
            let words: Vec<&str> = decl.split_whitespace().collect();
            let param = match words.as_slice() {
                [".align", align, ".b8", array] => {
                    let size = array.split('[').nth(1).and_then(|s| s.strip_suffix(']')).unwrap_or_else(|| panic!("{name}: `{line}`"));
                    PtxParam::Bytes { align: align.parse().unwrap(), size: size.parse().unwrap() }
                }
                [ty, ..] => PtxParam::Scalar(ty.to_string()),
                [] => panic!("{name}: empty parameter line"),
            };
            params.push(param);
        }
        out.push((name, params));
    }
    out
}

#[test]
fn the_entry_table_and_the_ptx_list_the_same_entries() {
    let table: Vec<&str> = rgdn::kernels::abi::ENTRIES.iter().map(|e| e.name).collect();
    let ptx = rgdn::kernels::ptx_entries();
    let mut seen = std::collections::BTreeSet::new();
    for name in &table {
        assert!(seen.insert(*name), "{name} is listed twice in abi::ENTRIES");
        assert!(ptx.contains(name), "abi::ENTRIES lists {name}, which is not an entry of the PTX");
    }
    for name in &ptx {
        assert!(
            table.contains(name),
            "the PTX entry {name} is not in abi::ENTRIES: every kernel takes a parameter struct from abi.rs and is listed there"
        );
    }
}

#[test]
fn every_entry_takes_its_parameter_struct() {
    let table = rgdn::kernels::abi::ENTRIES;
    let lists = ptx_param_lists(rgdn::kernels::PTX);
    assert_eq!(lists.len(), rgdn::kernels::ptx_entries().len(), "parsed a different number of entries");
    for (name, params) in &lists {
        let Some(sig) = table.iter().find(|e| e.name == name) else { panic!("{name} is in the PTX but not in abi::ENTRIES") };
        let [param] = params.as_slice() else {
            panic!(
                "{name} takes {} PTX parameters ({params:?}); it must take exactly one, its {}-byte parameter struct",
                params.len(),
                sig.param_size
            )
        };
        let PtxParam::Bytes { align, size } = param else {
            panic!("{name} takes a scalar parameter ({param:?}), not its {}-byte parameter struct", sig.param_size)
        };
        assert_eq!(*size, sig.param_size, "{name}: the PTX parameter is {size} bytes, its struct in abi.rs {} bytes", sig.param_size);
        assert_eq!(*align, sig.param_align, "{name}: the PTX parameter is aligned to {align}, its struct in abi.rs to {}", sig.param_align);
    }
}

#[test]
fn the_param_list_parser_reads_structs_and_scalars() {
    let ptx = ".visible .entry k(\n\t.param .align 8 .b8 k_param_0[112]\n)\n{\n}\n\
               .visible .entry s(\n\t.param .u64 .ptr .align 1 s_param_0,\n\t.param .u32 s_param_1\n)\n{\n}\n";
    let lists = ptx_param_lists(ptx);
    assert_eq!(lists[0], ("k".to_string(), vec![PtxParam::Bytes { align: 8, size: 112 }]));
    assert_eq!(lists[1], ("s".to_string(), vec![PtxParam::Scalar(".u64".into()), PtxParam::Scalar(".u32".into())]));
}

// ---- [layer-step] the readiness protocol's memory-model operations -----------------------------

/// The body of entry `name` in `ptx`, from `.visible .entry name(` to its closing brace.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx.find(&format!(".visible .entry {name}(")).unwrap_or_else(|| panic!("{name} is not in the PTX"));
    let body = &ptx[start..];
    &body[..body.find("\n}\n").expect("the entry's body ends")]
}

/// The scoped memory operations of one kernel body, in text order: (opcode, address register)
/// of every `ld/st/red/atom` with a `.gpu`/`.sys`/`.cta` scope, and every fence or membar
/// (address "").
fn scoped_memory_operations(body: &str) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for line in body.lines() {
        // device/grid.rs wraps each operation as `{ .reg .b64 ga; cvta.to.global.u64 ga, %rdN; op …, [ga]; }`.
        let address = line.split("cvta.to.global.u64 ga, ").nth(1).and_then(|r| r.split(';').next()).unwrap_or("").trim();
        for stmt in line.split(';') {
            let opcode = stmt.trim().trim_start_matches('{').split_whitespace().next().unwrap_or("");
            let scoped = ["ld.", "st.", "red.", "atom."].iter().any(|p| opcode.starts_with(p))
                && [".gpu", ".sys", ".cta"].iter().any(|s| opcode.contains(s));
            if scoped {
                ops.push((opcode.to_string(), address.to_string()));
            } else if opcode.starts_with("fence.") || opcode.starts_with("membar.") {
                ops.push((opcode.to_string(), String::new()));
            }
        }
    }
    ops
}

/// What GDN_LAYER_STEP's readiness argument (`kernels-gpu/src/device/grid.rs`, module docs) needs
/// of one entry's PTX, or why it does not hold: its scoped operations are only the protocol's —
/// relaxed polls, the acquire read of a polled flag, the release stores of `publish_item`, the
/// release add of `arrive`, the relaxed store of `close_launch` — and every acquire reads the
/// address the poll just before it read (the flag it confirms), with at least one acquire,
/// release store and release add present.
fn readiness_protocol_problem(body: &str) -> Option<String> {
    readiness_problem(body, &["ld.acquire.gpu.global.u64", "st.release.gpu.global.u64", "red.release.gpu.global.add.u64"])
}

/// [seq-batch] The batched entries' readiness protocol (`device/grid.rs`: `publish_count`,
/// `wait_count`): the same operations, with the chunk counters' release adds in place of the
/// flags' release stores — an acquire of each polled counter and release adds present.
fn batch_readiness_protocol_problem(body: &str) -> Option<String> {
    readiness_problem(body, &["ld.acquire.gpu.global.u64", "red.release.gpu.global.add.u64"])
}

/// Whether `body`'s scoped operations are only the protocol's, the `needed` ones present, every
/// acquire reading the address of the poll just before it.
fn readiness_problem(body: &str, needed: &[&str]) -> Option<String> {
    const ALLOWED: [&str; 5] = [
        "ld.relaxed.gpu.global.u64",
        "ld.acquire.gpu.global.u64",
        "st.release.gpu.global.u64",
        "red.release.gpu.global.add.u64",
        "st.relaxed.gpu.global.u64",
    ];
    let ops = scoped_memory_operations(body);
    if let Some((op, _)) = ops.iter().find(|(op, _)| !ALLOWED.contains(&op.as_str())) {
        return Some(format!("`{op}` is not one of the protocol's operations"));
    }
    for needed in needed {
        if !ops.iter().any(|(op, _)| op == needed) {
            return Some(format!("no `{needed}`"));
        }
    }
    for (i, (op, address)) in ops.iter().enumerate() {
        if op != "ld.acquire.gpu.global.u64" {
            continue;
        }
        let poll = ops[..i].iter().rev().find(|(op, _)| op == "ld.relaxed.gpu.global.u64");
        if poll.map(|(_, a)| a) != Some(address) {
            return Some(format!("the acquire of {address} does not follow a poll of the same flag (poll before it: {poll:?})"));
        }
    }
    None
}

#[test]
fn every_layer_step_entry_keeps_the_readiness_protocol() {
    let ptx = rgdn::kernels::PTX;
    let entries: Vec<&str> = rgdn::kernels::ptx_entries().into_iter().filter(|e| e.starts_with("gdn_layer_step_")).collect();
    assert!(!entries.is_empty(), "no gdn_layer_step entry in the PTX");
    for e in &entries {
        let body = entry_body(ptx, e);
        let problem =
            if e.starts_with("gdn_layer_step_batch_") { batch_readiness_protocol_problem(body) } else { readiness_protocol_problem(body) };
        if let Some(problem) = problem {
            panic!("{e}: {problem}");
        }
    }
    assert!(entries.iter().any(|e| e.starts_with("gdn_layer_step_batch_")), "no batched layer-step entry in the PTX");
}

#[test]
fn the_readiness_protocol_check_refuses_weakened_orderings() {
    let ptx = rgdn::kernels::PTX;
    let entry = rgdn::kernels::ptx_entries()
        .into_iter()
        .find(|e| e.starts_with("gdn_layer_step_") && !e.starts_with("gdn_layer_step_batch_"))
        .expect("a layer-step entry");
    let body = entry_body(ptx, entry);
    assert_eq!(readiness_protocol_problem(body), None);
    // [seq-batch] The batched entries' counters: a weakened acquire or release add is refused too.
    let batch = rgdn::kernels::ptx_entries().into_iter().find(|e| e.starts_with("gdn_layer_step_batch_")).expect("a batched entry");
    let batch_body = entry_body(ptx, batch);
    assert_eq!(batch_readiness_protocol_problem(batch_body), None);
    for (from, to) in
        [("ld.acquire.gpu.global.u64", "ld.relaxed.gpu.global.u64"), ("red.release.gpu.global.add.u64", "red.relaxed.gpu.global.add.u64")]
    {
        let planted = batch_body.replace(from, to);
        assert_ne!(planted, batch_body, "{from} is in the batched body");
        assert!(batch_readiness_protocol_problem(&planted).is_some(), "batched: {from} → {to} was not refused");
    }
    // The acquire weakened to a relaxed read, the publication's release to a relaxed store, the
    // arrival's release add to a relaxed one, an added fence: each is refused.
    for (from, to) in [
        ("ld.acquire.gpu.global.u64", "ld.relaxed.gpu.global.u64"),
        ("st.release.gpu.global.u64", "st.relaxed.gpu.global.u64"),
        ("red.release.gpu.global.add.u64", "red.relaxed.gpu.global.add.u64"),
        ("ld.acquire.gpu.global.u64", "ld.volatile.global.u64"),
    ] {
        let planted = body.replace(from, to);
        assert_ne!(planted, body, "{from} is in the body");
        assert!(readiness_protocol_problem(&planted).is_some(), "{from} → {to} was not refused");
    }
    let fenced = body.replacen("ld.acquire.gpu.global.u64", "fence.acq_rel.gpu; ld.relaxed.gpu.global.u64", 1);
    assert!(readiness_protocol_problem(&fenced).is_some(), "an added fence was not refused");
    // The acquire of another address than the poll's.
    let (_, address) = scoped_memory_operations(body).into_iter().find(|(op, _)| op == "ld.acquire.gpu.global.u64").unwrap();
    let moved = body.replace(&format!("cvta.to.global.u64 ga, {address}; ld.acquire"), "cvta.to.global.u64 ga, %rd0; ld.acquire");
    assert_ne!(moved, body);
    assert!(readiness_protocol_problem(&moved).is_some(), "an acquire of another flag was not refused");
}
