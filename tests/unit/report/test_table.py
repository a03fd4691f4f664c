"""The troubleshooting table is data: complete, consistent with the checks, and faithful to its source."""
from __future__ import annotations

import re

import pytest

from tfcheck.battery import all_checks
from tfcheck.report import table

SOURCE_ROWS = {  # §5.3 of the second source article, verbatim
    "mat1-mat2-shapes": ("线性层输入维度不匹配", "检查d_model和输入最后一维是否一致"),
    "tensor-size-mismatch": ("残差连接时维度不一致", "确认子层输出维度和输入维度相同"),
    "out-of-memory": ("batch太大或模型太大", "减小batch size或用梯度累积"),
    "loss-nan": ("学习率太大或没有warmup", "加warmup，降低学习率，检查是否有除零"),
    "inference-worse-than-training": ("忘了加causal mask", "检查解码器自注意力是否加了掩码"),
    "does-not-converge": ("位置编码没加或加错", "确认位置编码在词嵌入之后加上"),
}


@pytest.mark.parametrize("row_id", SOURCE_ROWS)
def test_the_six_source_rows_keep_their_chinese_wording(row_id):
    r = table.row(row_id)
    cause, fix = SOURCE_ROWS[row_id]
    assert r.causes_zh == (cause,) and r.fixes_zh == (fix,)
    assert r.source.startswith("the article “Transformer架构深度解析：从Self-Attention原理到PyTorch代码实战”")


def test_every_row_is_complete_in_both_languages():
    for r in table.rows().values():
        assert re.fullmatch(r"[a-z0-9-]+", r.id)
        assert r.symptom and r.causes and r.fixes and r.symptom_zh and r.causes_zh and r.fixes_zh


def test_checks_and_rows_point_at_each_other():
    rows = table.rows()
    for chk in all_checks():
        for row_id in chk.rows:
            assert row_id in rows, f"{chk.id} reports row {row_id!r}, which the table does not have"
            assert chk.id in rows[row_id].checks, f"row {row_id!r} does not list {chk.id}"
    ids = {c.id for c in all_checks()}
    for r in rows.values():
        assert set(r.checks) <= ids, f"row {r.id} lists unknown checks {set(r.checks) - ids}"


@pytest.mark.parametrize("message,row_id", [
    ("mat1 and mat2 shapes cannot be multiplied (21x64 and 32x32)", "mat1-mat2-shapes"),
    ("The size of tensor a (32) must match the size of tensor b (64) at non-singleton dimension 2",
     "tensor-size-mismatch"),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
    ("index out of range in self", None),
])
def test_error_messages_map_to_rows(message, row_id):
    matched = table.match_error(message)
    assert (matched.id if matched else None) == row_id
