"""`auditor review queue|claims|submit|feedback`: the review workflow from the command line.

    auditor review queue --domain medical                       # contradicted, blocked, low-confidence, unreviewed
    auditor review submit AUDIT_ID --confirm 0 --false-positive 2 --note 2 "dose is for the ER form"
    auditor review submit AUDIT_ID --missed "Warfarin doubles bleeding risk with aspirin" --note-all "..."
    auditor review feedback --since 7d --output disputes.jsonl  # disputed verdicts for rule-pack authors
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from auditor.cli import CliError
from auditor.commands.audits import LIST_COLUMNS, _list_row
from auditor.commands.common import (
    add_json_flag,
    guarded,
    load_settings,
    open_database,
    print_json,
    print_table,
    validation_message,
)
from auditor.commands.filters import add_record_filters, build_filter
from auditor.trail import reads, reviews
from auditor.trail.access_log import CliOperator
from auditor.trail.reviews import FeedbackFilters, QueueFilters, ReviewIn
from auditor.trail.schemas import parse_moment


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("review", help="review verdicts: the queue, per-claim reviews, feedback")
    actions = parser.add_subparsers(dest="action", required=True)
    queue = actions.add_parser("queue", help="records whose verdicts need a person (not yet reviewed)")
    add_record_filters(queue)
    queue.add_argument("--min-confidence", type=float, default=None,
                       help="a claim judged less confident than this needs review (default: AUDITOR_REVIEW_MIN_CONFIDENCE)")
    queue.add_argument("--limit", type=int, default=50, help="records per page, 1-500 (default 50)")
    queue.add_argument("--cursor", help="the page after this cursor")
    add_json_flag(queue, "the page")
    queue.set_defaults(func=_queue)
    submit = actions.add_parser("submit", help="confirm or dispute a record's current verdicts, claim by claim")
    submit.add_argument("audit_id", help="the record (see `auditor audits show`)")
    for flag, decision in (("--confirm", "confirm"), ("--false-positive", "false_positive"),
                           ("--false-negative", "false_negative")):
        submit.add_argument(flag, dest=decision, type=int, action="append", default=[], metavar="CLAIM",
                            help=f"claim number (from `audits show`) to mark {decision.replace('_', ' ')}; repeatable")
    submit.add_argument("--missed", action="append", default=[], metavar="TEXT",
                        help="a wrong claim the validators did not find (a false negative); repeatable")
    submit.add_argument("--note", nargs=2, action="append", default=[], metavar=("CLAIM", "TEXT"),
                        help="a note on one claim; repeatable")
    submit.add_argument("--note-all", metavar="TEXT", help="a note on the whole review")
    submit.add_argument("--verdicts", metavar="EVALUATION_ID",
                        help="the verdict set you reviewed (refused if the record's verdicts changed since)")
    add_json_flag(submit, "the review")
    submit.set_defaults(func=_submit)
    feedback = actions.add_parser("feedback", help="disputed verdicts as JSON lines, for rule-pack authors")
    feedback.add_argument("--since", help="reviews from this time (ISO, or 7d, 12h)")
    feedback.add_argument("--domain", help="only this domain")
    feedback.add_argument("--decision", choices=("false_positive", "false_negative"), help="only this kind of dispute")
    feedback.add_argument("--output", type=Path, help="file to write (default: stdout)")
    feedback.set_defaults(func=_feedback)


def _queue(args: argparse.Namespace) -> int:
    settings = load_settings()
    if not 1 <= args.limit <= 500:
        raise CliError("--limit must be between 1 and 500")
    filters = build_filter(QueueFilters, args, limit=args.limit, cursor=args.cursor, min_confidence=args.min_confidence)
    database = open_database(settings)
    try:
        rows, cursor = guarded(reviews.review_queue, database, CliOperator(), filters,
                               default_min_confidence=settings.review_min_confidence)
    except (reads.TenantNotAllowed, ValueError) as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json({"data": [r.model_dump(mode="json", exclude={"evaluations", "reviews", "holds"}) for r in rows],
                    "next_cursor": cursor})
        return 0
    print_table(LIST_COLUMNS, [_list_row(row) for row in rows], empty="the review queue is empty for these filters")
    if cursor:
        print(f"more: --cursor {cursor}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    notes = {}
    for claim, text in args.note:
        if not claim.isdigit():
            raise CliError(f"--note: claim number expected, got {claim!r}")
        notes[int(claim)] = text
    items = [{"claim_index": index, "decision": decision, "note": notes.pop(index, None)}
             for decision in ("confirm", "false_positive", "false_negative") for index in getattr(args, decision)]
    items += [{"claim_index": None, "decision": "false_negative", "text": text} for text in args.missed]
    if notes:
        raise CliError(f"--note for claim {sorted(notes)[0]}, which the review does not mark")
    if not items:
        raise CliError("mark at least one claim: --confirm, --false-positive, --false-negative or --missed")
    try:
        review = ReviewIn.model_validate({"claims": items, "note": args.note_all, "evaluation_id": args.verdicts})
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
    database = open_database(load_settings())
    try:
        result = guarded(reviews.submit_review, database, CliOperator(), args.audit_id, review)
    except (reads.RecordNotFound, reviews.ReviewError) as exc:
        raise CliError(str(exc).strip("'")) from None
    if args.json:
        print_json(result)
    else:
        print(f"review {result['id']} of {args.audit_id} recorded (verdicts {result['verdict_ref']}): "
              f"{len(items) - result['disputed']} confirmed, {result['disputed']} disputed")
    return 0


def _feedback(args: argparse.Namespace) -> int:
    try:
        filters = FeedbackFilters(since=parse_moment(args.since) if args.since else None, domain=args.domain,
                                  decision=args.decision)
    except ValidationError as exc:
        raise CliError(validation_message(exc)) from None
    database = open_database(load_settings())
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    count = 0
    try:
        for line in guarded(lambda: list(reviews.feedback_lines(database, CliOperator(), filters))):
            out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            count += 1
    finally:
        if args.output:
            out.close()
    if args.output or not count:
        print(f"{count} disputed verdict(s)" + (f" written to {args.output}" if args.output else ""), file=sys.stderr)
    return 0
