"""``signoff jobs``: the background jobs given up on (quarantined), and an operator's retry."""

from __future__ import annotations

import argparse

from bot.settings import Settings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser("jobs", help="quarantined background jobs (failed every attempt)")
    jobs_sub = jobs.add_subparsers(dest="jobs_command")
    jobs_sub.add_parser("list", help="the quarantined jobs, newest first (the default)")
    retry = jobs_sub.add_parser("retry", help="queue a quarantined job again, its attempts counted afresh")
    retry.add_argument("id", type=int)


async def jobs_command(settings: Settings, args: argparse.Namespace) -> int:
    from bot.app import create_app

    app = await create_app(settings, seed=False)
    try:
        queue = app.services.jobs
        if args.jobs_command == "retry":
            if not await queue.requeue(args.id):
                print(f"signoff: job {args.id} is not quarantined")
                return 1
            print(f"job {args.id} queued again")
            return 0
        rows = await queue.quarantined()
        if not rows:
            print("no quarantined jobs")
        for job in rows:
            print(f"{job.id}\t{job.kind}\t{job.attempts} attempts\t{job.last_error or ''}")
        return 0
    finally:
        await app.close()
