"""fuser"""
