"""What is written from the model and committed: images/ (`render`), the cells' Python locks (`lock`), the base
digests (`baselock`), the docs' generated blocks (`docsblocks`); `project` checks them all for drift at once, and
`changes` says which cells' files changed since a commit."""
