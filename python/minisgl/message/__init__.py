"""Typed messages between the server's processes, and their msgpack codec (chapter 12).

    frontend --TokenizeMsg/AbortMsg/ControlMsg--> tokenizer --UserMsg/AbortMsg/ControlMsg-->
    scheduler --TokenOutput/ControlReply--> detokenizer --UserReply/ControlReply--> frontend
"""

from minisgl.core import TokenOutput

from .backend import UserMsg
from .codec import MessageError, decode, encode, message
from .frontend import ControlReply, ReadyMsg, UserReply
from .tokenizer import AbortMsg, ControlMsg, TokenizeMsg

__all__ = [
    "AbortMsg",
    "ControlMsg",
    "ControlReply",
    "MessageError",
    "ReadyMsg",
    "TokenOutput",
    "TokenizeMsg",
    "UserMsg",
    "UserReply",
    "decode",
    "encode",
    "message",
]
