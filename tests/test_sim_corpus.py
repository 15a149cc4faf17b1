"""The validation corpus (issue 18): the shipped rows load, agree with their sources, and a bad file is refused
with one ValueError naming the row and the column."""

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from sim.validation.__main__ import main
from sim.validation.corpus import (
    COLUMNS,
    CORPUS_CSV,
    SOURCES_TOML,
    PublishedRow,
    independent_groups,
    load_corpus,
    load_sources,
    regime,
    totals_line,
)
from sim.validation.paper import rows as birder_public_rows

README = Path(CORPUS_CSV).parent / "README.md"


def test_shipped_corpus_loads_and_every_source_has_rows():
    rows, sources = load_corpus(), load_sources()
    assert all(isinstance(r, PublishedRow) for r in rows)
    assert {r.source for r in rows} == set(sources)
    assert all(r.nodes >= 2 and r.single_node_throughput is not None for r in rows)


def test_readme_counts_are_the_corpus_counts():
    """The README's per-source table (rows, communication-bound rows) and its totals line are the corpus's."""
    rows, sources, text = load_corpus(), load_sources(), README.read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `([a-z0-9.+_-]+)` \| (\d+ \| \d+) \|", text, flags=re.M))
    counted = {s: f"{sum(r.source == s for r in rows)} | "
                  f"{sum(r.source == s and regime(r) == 'communication-bound' for r in rows)}" for s in sources}
    assert table == counted
    assert totals_line(rows, sources) in text


def test_independent_groups_join_sources_that_name_each_other():
    groups = independent_groups(load_sources())
    assert ("nvidia-dle-pytorch-bert", "nvidia-dle-paddle-bert", "nvidia-dle-tf-bert", "nvidia-dle-tf2-bert") in groups
    assert ("birder-neurips2023",) in groups
    assert sorted(s for g in groups for s in g) == sorted(load_sources())


def test_the_summary_command_prints_the_totals_and_draws_the_plot(tmp_path, capsys):
    assert main(["--plot", str(tmp_path / "efficiency.png")]) == 0
    out = capsys.readouterr().out
    assert totals_line(load_corpus(), load_sources()) in out
    assert (tmp_path / "efficiency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_summary_command_refuses_an_unwritable_plot_path(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["--plot", str(blocker / "efficiency.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m sim.validation: ") and "\n" not in err
    assert blocker.read_text() == "not a directory"


def test_birder_rows_are_the_public_csv_multi_node_rows():
    """The Birder paper's rows are exactly the public CSV's multi-node rows, single-node from its 8-GPU rows."""
    public = birder_public_rows()
    single = {(r.network, r.optimizer): r.throughput for r in public if r.gpus == 8}
    expected = sorted((r.gpus // 8, "tcp" if r.network == "10gbe" else "ib", r.optimizer, r.throughput,
                       single[(r.network, r.optimizer)]) for r in public if r.gpus > 8)
    ours = sorted((r.nodes, r.transport, r.optimizer, r.throughput, r.single_node_throughput)
                  for r in load_corpus() if r.source == "birder-neurips2023")
    assert ours == expected


def test_gradient_accumulation_is_read_from_the_notes():
    """NVIDIA's PyTorch BERT table: mixed precision at 2 nodes and sequence length 128 accumulates 16
    micro-batches of 256 per all-reduce (4096 per GPU); 32 nodes accumulate none. DLPerf accumulates nowhere."""
    rows = load_corpus()
    pytorch_bert = {(r.nodes, r.model, r.precision): r.grad_accum for r in rows
                    if r.source == "nvidia-dle-pytorch-bert"}
    assert pytorch_bert[(2, "bert-large-pretrain-seq128", "amp")] == 16
    assert pytorch_bert[(32, "bert-large-pretrain-seq128", "amp")] == 1
    assert pytorch_bert[(2, "bert-large-pretrain-seq512", "fp32")] == 128
    assert {r.grad_accum for r in rows if r.source == "dlperf-oneflow"} == {1}


def test_regime_follows_the_schema_definition():
    row = load_corpus()[0]
    base = replace(row, nodes=4, single_node_throughput=100.0)
    assert regime(replace(base, throughput=400 / 1.15 + 0.01)) == "compute-bound"
    assert regime(replace(base, throughput=400 / 1.15 - 0.01)) == "communication-bound"
    assert regime(replace(base, single_node_throughput=None)) is None


# --- bad files: each mutation of the shipped corpus is refused with one ValueError naming line and column

def write_corpus(tmp_path, header, records) -> Path:
    path = tmp_path / "corpus.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(records)
    return path


def shipped_records() -> list[list[str]]:
    with open(CORPUS_CSV, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1:]


def with_cell(column: str, value: str, line: int = 2) -> list[list[str]]:
    records = shipped_records()
    records[line - 2][COLUMNS.index(column)] = value
    return records


def test_a_copy_of_the_shipped_file_loads(tmp_path):
    assert load_corpus(write_corpus(tmp_path, COLUMNS, shipped_records())) == load_corpus()


@pytest.mark.parametrize("header, message", [
    ((*COLUMNS[:-1], "remarks"), r"unknown columns \['remarks'\]"),
    ((*COLUMNS[:-1], "source"), r"duplicate columns \['source'\]"),
    (COLUMNS[:-1], r"missing columns \['notes'\]"),
])
def test_bad_header_is_refused(tmp_path, header, message):
    records = [r[:len(header)] for r in shipped_records()]
    with pytest.raises(ValueError, match=r"line 1: .*" + message):
        load_corpus(write_corpus(tmp_path, header, records))


@pytest.mark.parametrize("column, value, message", [
    ("source", "nobody-2099", r"column source: 'nobody-2099' has no \[sources.nobody-2099\] entry"),
    ("model", "resnet9000", r"column model: 'resnet9000' is not a model"),
    ("params", "1000", r"column params: 1000 is more than 5% away"),
    ("throughput", "-5", r"column throughput: '-5' is not positive"),
    ("throughput", "nan", r"column throughput: 'nan' is not positive and finite"),
    ("throughput", "1e9", r"column throughput: 1e\+09 is more than 1.5 x linear scaling"),
    ("single_node_throughput", "0", r"column single_node_throughput: '0' is not positive"),
    ("nodes", "1", r"column nodes: 1 is not a multi-node measurement"),
    ("nodes", "2.5", r"column nodes: '2.5' is not a positive integer"),
    ("gpus_per_node", "0", r"column gpus_per_node: '0' is not positive"),
    ("line_rate_gbps", "100000", r"column line_rate_gbps: 100000.0 Gb/s per NIC is not physical"),
    ("batch_per_gpu", "-32", r"column batch_per_gpu: '-32' is not positive"),
    ("transport", "pigeon", r"column transport: 'pigeon' is not one of tcp, ib, roce"),
    ("intra", "nvswitch", r"column intra: 'nvswitch' is not one of nvlink, pcie"),
    ("precision", "fp8", r"column precision: 'fp8' is not one of"),
    ("gpu", "A100 80GB", r"column gpu: 'A100 80GB' is not a lower-case name"),
    ("table", "", r"column table: empty"),
    ("notes", "grad_accum=0", r"column notes: grad_accum=N must appear at most once, with N >= 1"),
    ("notes", "grad_accum=2; grad_accum=4", r"column notes: grad_accum=N must appear at most once"),
    ("notes", "parameter_servers=0", r"column notes: parameter_servers=N must appear at most once, with N >= 1"),
    ("notes", "parameter_servers=2; parameter_servers=4", r"column notes: parameter_servers=N must appear"),
    ("notes", "warmup_fraction=1.5", r"column notes: warmup_fraction=F must appear at most once, with 0 <= F < 1"),
    ("measured_link_gbps", "-4", r"column measured_link_gbps: '-4' is not positive"),
    ("measured_link_gbps", "inf", r"column measured_link_gbps: 'inf' is not positive and finite"),
    ("measured_link_gbps", "0.001", r"column measured_link_gbps = 0.001 Gb/s is below 0.01 Gb/s"),
    # line 5 is a 10 Gb/s row of the Birder paper: more than its line rate (plus 1% rounding) was not measured
    ("measured_link_gbps", "10.2", r"column measured_link_gbps = 10.2 Gb/s exceeds the NIC's line rate of 10 Gb/s"),
    ("measured_link_gbps", "9.4", r"column measured_link_gbps: the notes must say what measured it"),
])
def test_bad_value_is_refused_naming_line_and_column(tmp_path, column, value, message):
    line = 5
    with pytest.raises(ValueError, match=rf"line {line}: {message}"):
        load_corpus(write_corpus(tmp_path, COLUMNS, with_cell(column, value, line)))


def test_the_measured_link_rate_is_read_where_a_source_states_it():
    """Only the DeepSpeed blog states what its links measured: 4.1 Gb/s by iperf on its 40 GbE, 32 Gb/s by
    perftest on its 40 Gb/s InfiniBand QDR; its 1-bit Adam rows are of the compression stage (no warm-up), the
    Birder paper's average 15 of 100 epochs of warm-up."""
    rows = load_corpus()
    measured = {(r.source, r.transport, r.measured_link_gbps) for r in rows if r.measured_link_gbps is not None}
    assert measured == {("deepspeed-onebit-adam-blog", "tcp", 4.1), ("deepspeed-onebit-adam-blog", "ib", 32.0)}
    assert all(r.measured_link_gbps is not None for r in rows if r.source == "deepspeed-onebit-adam-blog")
    assert {r.warmup_fraction for r in rows if r.optimizer == "onebit-adam"
            and r.source == "deepspeed-onebit-adam-blog"} == {0.0}
    paper = {r.warmup_fraction for r in rows if r.source == "birder-neurips2023" and r.optimizer == "onebit-adam"}
    assert paper == {0.15}  # the Birder paper's 1-bit Adam rows average its first 15 of 100 epochs of warm-up
    assert {r.warmup_fraction for r in rows if r.optimizer != "onebit-adam"} == {None}


def test_a_file_without_the_optional_column_loads_with_no_measured_rate(tmp_path):
    at = COLUMNS.index("measured_link_gbps")
    header = [c for c in COLUMNS if c != "measured_link_gbps"]
    records = [r[:at] + r[at + 1:] for r in shipped_records()]
    rows = load_corpus(write_corpus(tmp_path, header, records))
    assert rows == tuple(replace(r, measured_link_gbps=None) for r in load_corpus())


def test_a_repeated_setup_is_refused(tmp_path):
    records = shipped_records()
    records.append(list(records[3]))
    with pytest.raises(ValueError, match=rf"line {len(records) + 1}: repeats the set-up of line 5"):
        load_corpus(write_corpus(tmp_path, COLUMNS, records))


def test_a_short_record_is_refused(tmp_path):
    records = shipped_records()
    records[2] = records[2][:-2]
    with pytest.raises(ValueError, match=rf"line 4: {len(COLUMNS) - 2} cells for {len(COLUMNS)} columns"):
        load_corpus(write_corpus(tmp_path, COLUMNS, records))


@pytest.mark.parametrize("path, message", [
    ("/dev/zero", "a device or a socket, not a regular file"),
    ("/nonexistent/corpus.csv", "no such corpus file"),
])
def test_an_unreadable_corpus_is_refused_without_hanging(path, message):
    with pytest.raises(ValueError, match=message):
        load_corpus(path)


def test_a_binary_corpus_is_refused(tmp_path):
    binary = tmp_path / "corpus.csv"
    binary.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match="not a UTF-8 text file"):
        load_corpus(binary)


def test_an_empty_corpus_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no rows"):
        load_corpus(write_corpus(tmp_path, COLUMNS, []))


@pytest.mark.parametrize("edit, message", [
    (('how_read = "table"', 'how_read = "vibes"'), r"how_read must be one of"),
    (('year = 2023', 'year = "recent"'), r"year must be an integer year"),
    (('testbed = "Peng', 'testbd = "Peng'), r"unknown keys \['testbd'\], missing keys \['testbed'\]"),
    (('independent_of = []', 'independent_of = ["ghost"]'), r"independent_of names 'ghost'"),
    (('url = "https://papers', 'url = "ftp://papers'), r"url must be an https:// address"),
])
def test_bad_sources_file_is_refused(tmp_path, edit, message):
    text = Path(SOURCES_TOML).read_text(encoding="utf-8")
    assert edit[0] in text
    bad = tmp_path / "sources.toml"
    bad.write_text(text.replace(edit[0], edit[1], 1), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_sources(bad)
    with pytest.raises(ValueError, match=message):
        load_corpus(sources_path=bad)


def test_added_profiles_have_the_published_parameter_counts():
    """HuggingFace BertForPreTraining: 336,226,108 (bert-large-uncased) and 110,106,428 (bert-base-uncased);
    torchvision: ResNet-101 44,549,160, ResNet-152 60,192,808, VGG-16 138,357,544."""
    from sim.models import bert_pretraining, model_profile
    assert model_profile("resnet101").n_params == 44_549_160
    assert model_profile("resnet152").n_params == 60_192_808
    assert model_profile("vgg16").n_params == 138_357_544
    assert model_profile("bert-large-pretrain-seq128").n_params == 336_226_108
    assert model_profile("bert-large-pretrain-seq512").n_params == 336_226_108
    assert bert_pretraining("base", 768, 12, 128).n_params == 110_106_428
    seq128, seq512 = model_profile("bert-large-pretrain-seq128"), model_profile("bert-large-pretrain-seq512")
    assert 4.0 < seq512.forward_flops / seq128.forward_flops < 5.0  # 4x the tokens, plus attention's square
