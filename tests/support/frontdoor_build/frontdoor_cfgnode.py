"""A minGPT-style CfgNode: a bag of attributes, set by keyword or merged from a dict."""


class CfgNode:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def merge_from_dict(self, d):
        self.__dict__.update(d)
