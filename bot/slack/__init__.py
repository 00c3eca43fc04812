"""The Slack face, outbound half: what signoff shows and sends in Slack.

* ``ids`` — action/callback/block id constants (contract) and strict codecs for button
  values (``{"id", "version"}``), feedback values and the reject modal's metadata.
* ``blocks`` — pure Block Kit builders: confirmation and approval cards (pending and
  decided), the reject modal, App Home, escalation and trace, feedback, long answers.
* ``view_models`` — the small frozen inputs those builders take beside the records.
* ``wording`` — every sentence the face says in its own voice.
* ``mrkdwn`` — escaping, clipping, dates, mentions and splitting of text.
* ``sender`` — ``make_client`` and ``SlackSender`` (per-channel pacing, errors as
  ``SlackSendError``); ``streaming`` — ``StreamingReply`` for one turn.

Only ``bot/slack`` imports ``slack_sdk``; nothing here imports the runtime.
"""
